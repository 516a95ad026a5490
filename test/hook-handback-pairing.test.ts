/**
 * `beforeRun` and `afterRun` pair on each worker, also for a run handed back for capacity
 * (contracts §8, §15). A handed-back run is continued by whichever worker takes its job next;
 * the continuing part called no `beforeRun`, so on another worker than the first part's the
 * extension there got an `afterRun` (and `onError`) for a run it had never seen begin: its
 * per-run state was missing. Now a worker that continues a run whose `beforeRun` it did not
 * call calls it (no `onMessage`: the input was the first part's); one that continues its own
 * run does not call it again. Real API, two workers (in this process, each with its own
 * extension), Postgres, Redis and an OpenAI-compatible endpoint.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { type Acquired, ProviderLimits } from "../src/shared/provider-limits.js";
import { defineExtension, type Extension } from "../src/worker/extensions.js";
import { type RunningWorker, startWorker } from "../src/worker/worker.js";
import { type FakeOpenAI, startFakeOpenAI } from "./support/fake-openai.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

let fleet: FleetEnv;
let client: FleetClient;
let model: FakeOpenAI;
const workers: RunningWorker[] = [];
const acquire = ProviderLimits.prototype.acquire;

/** Each worker's extension: what it saw, by run, and whether its afterRun found its state. */
const seen: { worker: string; runId: string; hook: string }[] = [];
const unpaired: string[] = [];
function spans(worker: string): Extension {
  const open = new Set<string>();
  return defineExtension({
    name: "spans",
    beforeRun(ctx) {
      seen.push({ worker, runId: ctx.runId, hook: "beforeRun" });
      open.add(ctx.runId);
    },
    onMessage(ctx) {
      seen.push({ worker, runId: ctx.runId, hook: "onMessage" });
    },
    afterRun(ctx) {
      seen.push({ worker, runId: ctx.runId, hook: "afterRun" });
      if (!open.delete(ctx.runId)) unpaired.push(`${worker}:${ctx.runId}`);
    },
  });
}

const hooksOf = (runId: string, worker: string) =>
  seen.filter((s) => s.runId === runId && s.worker === worker).map((s) => s.hook);

async function start(worker: string): Promise<RunningWorker> {
  const running = await startWorker(
    { ...fleet.config, logLevel: "silent" },
    { serveMetrics: false, extensions: [spans(worker)] },
  );
  workers.push(running);
  return running;
}

async function waitHandedBack(runId: string): Promise<void> {
  await waitFor(
    async () => {
      const [row] = await fleet.database.sql<{ status: string; started_at: Date | null }[]>`
        select status, started_at from runs where id = ${runId}`;
      return row?.status === "queued" && row.started_at !== null;
    },
    20_000,
    "the run handed back",
  );
}

beforeAll(async () => {
  model = await startFakeOpenAI([{ text: ["done"], times: 10 }]);
  fleet = await createFleetEnv("hook-handback-pairing", {
    env: {
      FLEET_MODEL_ENDPOINTS: JSON.stringify({
        gated: { provider: "openai", baseUrl: model.url, limits: { maxConcurrent: 5 } },
      }),
      // A refusal whose place is further than this is a hand-back.
      FLEET_ENDPOINT_MAX_WAIT_MS: "200",
    },
  });
  ({ client } = await fleet.startApi());
  // Each run's first request is refused with a place 1 s away: the run is handed back once.
  const refused = new Set<string>();
  vi.spyOn(ProviderLimits.prototype, "acquire").mockImplementation(async function (
    this: ProviderLimits,
    input,
  ): Promise<Acquired> {
    if (refused.has(input.request)) return acquire.call(this, input);
    refused.add(input.request);
    return { granted: false, retryInMs: 1_000, reason: "concurrency" };
  });
}, 60_000);
afterAll(async () => {
  vi.restoreAllMocks();
  for (const worker of workers) await worker.stop();
  await fleet?.close();
  await model?.close();
});

const agent = { model: { provider: "openai" as const, endpoint: "gated", model: "gpt-test" } };

describe("a run handed back for capacity", () => {
  it("continued by another worker: that worker calls beforeRun before its afterRun", async () => {
    const first = await start("first");
    const session = await client.createSession({ agent });
    const { runId } = await client.send(session.id, "go");
    await waitHandedBack(runId);
    await first.stop();
    await start("second");
    expect((await client.waitForRun(runId, { timeoutMs: 30_000 })).endedReason).toBe("completed");
    await waitFor(async () => hooksOf(runId, "second").includes("afterRun"), 10_000, "afterRun");
    expect(hooksOf(runId, "first")).toEqual(["beforeRun", "onMessage"]);
    // Before: ["afterRun"], its per-run state missing.
    expect(hooksOf(runId, "second")).toEqual(["beforeRun", "afterRun"]);
    expect(unpaired).not.toContain(`second:${runId}`);
  }, 90_000);

  it("continued by the same worker: beforeRun is not called again", async () => {
    const session = await client.createSession({ agent });
    const { runId } = await client.send(session.id, "go");
    await waitHandedBack(runId);
    expect((await client.waitForRun(runId, { timeoutMs: 30_000 })).endedReason).toBe("completed");
    await waitFor(async () => hooksOf(runId, "second").includes("afterRun"), 10_000, "afterRun");
    expect(hooksOf(runId, "second")).toEqual(["beforeRun", "onMessage", "afterRun"]);
    expect(unpaired).not.toContain(`second:${runId}`);
  }, 90_000);
});
