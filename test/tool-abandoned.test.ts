/**
 * `fleet_tools_abandoned{tool}` (tool-call.ts): calls answered while their tool, deaf to its
 * signal, still runs: after its time limit's grace, or after its run asked it to stop (a
 * cancel, a shutdown, a lost lease). Up when the call is answered, down when the tool ends.
 * Without a worker (test/tool-timeout.test.ts shows it on one).
 */
import { describe, expect, it } from "vitest";
import { createMetrics, initToolSeries } from "../src/shared/metrics.js";
import { runToolCall } from "../src/worker/tool-call.js";
import { type Tool, ToolRegistry } from "../src/worker/tools/registry.js";

/** A tool that ignores its signal and returns when told; `started` resolves as it runs. */
function deafTool(name: string) {
  let release!: () => void;
  let started!: () => void;
  const running = new Promise<void>((resolve) => {
    started = resolve;
  });
  const released = new Promise<void>((resolve) => {
    release = resolve;
  });
  const tool: Tool = {
    name,
    description: "",
    parameters: { type: "object", properties: {} },
    run: async () => {
      started();
      await released;
      return "finally";
    },
  };
  return { tool, running, release };
}

async function abandoned(metrics: ReturnType<typeof createMetrics>): Promise<Record<string, number>> {
  const metric = (await metrics.registry.getMetricsAsJSON()).find((m) => m.name === "fleet_tools_abandoned");
  return Object.fromEntries((metric?.values ?? []).map((v) => [String(v.labels.tool), v.value]));
}

/** A turn of the event loop for several: long enough for settled promises' reactions to run. */
const settle = () => new Promise((resolve) => setImmediate(resolve));

function setup(...tools: Tool[]) {
  const registry = new ToolRegistry().register(...tools);
  const metrics = createMetrics("worker");
  initToolSeries(metrics, registry.names());
  const call = (tool: Tool, signal: AbortSignal, agent = {}) =>
    runToolCall(
      tool,
      { id: `call-${tool.name}`, name: tool.name, arguments: {} },
      { fence: { sessionId: "s", epoch: 1 }, runId: "r", agent, signal, stepSeq: 2 },
      { tools: registry, metrics },
    );
  return { metrics, call };
}

describe("fleet_tools_abandoned", () => {
  it("starts at 0 for every registered tool", async () => {
    const { metrics } = setup(deafTool("a").tool, deafTool("b").tool);
    expect(await abandoned(metrics)).toEqual({ a: 0, b: 0 });
  });

  it("counts a timed-out tool that ignored its signal until it finally returns", async () => {
    const deaf = deafTool("deaf");
    const { metrics, call } = setup(deaf.tool);
    const outcome = await call(deaf.tool, new AbortController().signal, { toolTimeoutMs: 1 });
    expect(outcome.timedOut).toEqual({ stoppedInGrace: false });
    expect(await abandoned(metrics)).toEqual({ deaf: 1 });
    deaf.release();
    await settle();
    expect(await abandoned(metrics)).toEqual({ deaf: 0 });
  }, 30_000);

  it("counts a tool abandoned after its run asked it to stop, until it returns", async () => {
    const deaf = deafTool("deaf");
    const { metrics, call } = setup(deaf.tool);
    const run = new AbortController();
    const pending = call(deaf.tool, run.signal);
    await deaf.running;
    run.abort();
    expect((await pending).success).toBe(false);
    expect(await abandoned(metrics)).toEqual({ deaf: 1 });
    deaf.release();
    await settle();
    expect(await abandoned(metrics)).toEqual({ deaf: 0 });
  }, 30_000);

  it("never counts a tool that ends within its limit or stops when asked", async () => {
    const quick: Tool = { ...deafTool("quick").tool, run: async () => "done" };
    const polite: Tool = {
      ...quick,
      name: "polite",
      run: (_args, { signal }) =>
        new Promise<string>((_resolve, reject) =>
          signal.addEventListener("abort", () => reject(new Error("stopped"))),
        ),
    };
    const { metrics, call } = setup(quick, polite);
    expect((await call(quick, new AbortController().signal)).success).toBe(true);
    expect((await call(polite, new AbortController().signal, { toolTimeoutMs: 1 })).timedOut).toEqual({
      stoppedInGrace: true,
    });
    expect(await abandoned(metrics)).toEqual({ quick: 0, polite: 0 });
  });
});
