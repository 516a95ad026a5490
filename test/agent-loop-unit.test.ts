/**
 * runAgentLoop with hand-written fakes (no module mocks): fenced writes that record every
 * append and can be told to fail, a tool registry, metrics, and a model that plays steps.
 */
import { describe, expect, it } from "vitest";
import { type AgentConfig, parseAgentConfig } from "../src/shared/agent-config.js";
import { FencedError, ValidationError } from "../src/shared/errors.js";
import type { AssistantMessage, Message, StoredMessage, ToolMessage } from "../src/shared/messages.js";
import type { Fence, HistoryCursor } from "../src/shared/store/fenced-writes.js";
import type { TailState } from "../src/shared/tail-state.js";
import { runAgentLoop } from "../src/worker/agent-loop.js";
import { goalRoundsTaken, goalRoundText, pausesTaken } from "../src/worker/goal-rounds.js";
import type { AgentLoopDeps, LoopInput } from "../src/worker/loop-types.js";
import {
  type ModelEvent,
  type ModelProvider,
  type ModelRequest,
  ProviderError,
  type ToolSpec,
} from "../src/worker/models/provider.js";
import type { Tool } from "../src/worker/tools/registry.js";

const FENCE: Fence = { sessionId: "s1", epoch: 7 };
const RUN_ID = "run-1";

type Appended = {
  cursor: HistoryCursor;
  runId: string | null;
  message: Message;
  seq: number;
  tail: TailState;
};

/** Fenced writes that keep their own seq counter and a shared event log. */
function fakeWrites(log: string[], options: { failAppend?: number; stored?: number } = {}) {
  const appended: Appended[] = [];
  let appends = 0;
  let seq = options.stored ?? 1; // the stored history starts with the user message at seq 1
  const writes: AgentLoopDeps["writes"] = {
    reserveModelCall: async () => true,
    countBilledTokens: async () => {},
    async append(fence, cursor, runId, messages, tail) {
      appends++;
      expect(fence).toEqual(FENCE);
      if (appends === options.failAppend) {
        log.push(`append-fenced:${messages[0]!.role}`);
        throw new FencedError(fence.sessionId, fence.epoch);
      }
      // The loop's cursor must match what the store holds, or a real store would fence it out.
      expect(cursor.lastSeq).toBe(seq);
      return messages.map((message) => {
        seq++;
        log.push(`append:${message.role}`);
        appended.push({ cursor, runId, message, seq, tail });
        return { ...message, seq, createdAt: new Date(0).toISOString() } as StoredMessage;
      });
    },
  };
  return { writes, appended };
}

/** Tools that log when they run. */
function fakeTools(log: string[], tools: Record<string, (args: Record<string, unknown>) => Promise<string>>) {
  const specsAsked: string[][] = [];
  const registry: AgentLoopDeps["tools"] = {
    get(name) {
      const run = tools[name];
      if (!run) return undefined;
      const tool: Tool = {
        name,
        description: name,
        parameters: { type: "object" },
        async run(args) {
          log.push(`tool:${name}`);
          return run(args);
        },
      };
      return tool;
    },
    specs(names): ToolSpec[] {
      specsAsked.push([...names]);
      return names.map((name) => {
        if (!(name in tools))
          throw new ValidationError("agent.tools", `no tool named "${name}" is registered in this worker`);
        return { name, description: name, parameters: { type: "object" } };
      });
    },
  };
  return { registry, specsAsked };
}

function fakeCounter() {
  const labels: Record<string, string>[] = [];
  return { labels, inc: (l?: Record<string, string>) => labels.push(l ?? {}) };
}

function fakeMetrics() {
  const modelStops = fakeCounter();
  const toolCalls = fakeCounter();
  return {
    metrics: { modelStops, toolCalls } as unknown as AgentLoopDeps["metrics"],
    modelStops: modelStops.labels,
    toolCalls: toolCalls.labels,
  };
}

type Step = Omit<AssistantMessage, "role"> & { onStream?: () => void };

/** A model that answers step i on its i-th call (the last one repeats), logging each call. */
function fakeModel(log: string[], steps: Step[]): ModelProvider & { requests: ModelRequest[] } {
  const requests: ModelRequest[] = [];
  return {
    requests,
    async *stream(request): AsyncGenerator<ModelEvent> {
      const step = steps[Math.min(requests.length, steps.length - 1)]!;
      requests.push({ ...request, history: [...request.history] });
      log.push("model");
      if (step.content) yield { type: "text", delta: step.content };
      for (const call of step.toolCalls ?? []) yield { type: "tool_call", call };
      step.onStream?.();
      yield { type: "done", stopReason: step.stopReason, ...(step.usage ? { usage: step.usage } : {}) };
    },
  };
}

function agent(overrides: Partial<AgentConfig> = {}): AgentConfig {
  return {
    ...parseAgentConfig({ model: { provider: "scripted", steps: [{ text: "unused" }] } }),
    ...overrides,
  };
}

function setup(
  steps: Step[],
  options: {
    agent?: Partial<AgentConfig>;
    tools?: Record<string, (args: Record<string, unknown>) => Promise<string>>;
    failAppend?: number;
    signal?: AbortSignal;
    /** Messages stored after the user message before the run (their seqs follow it). */
    earlier?: Message[];
    /** The cancel check's answer (AgentLoopDeps.cancelled); absent: none. */
    cancelled?: boolean;
  } = {},
) {
  const log: string[] = [];
  const earlier = (options.earlier ?? []).map(
    (m, i) => ({ ...m, seq: i + 2, createdAt: new Date(0).toISOString() }) as StoredMessage,
  );
  const { writes, appended } = fakeWrites(log, { ...options, stored: 1 + earlier.length });
  const tools = options.tools ?? { write_file: async () => "wrote a.txt" };
  const { registry, specsAsked } = fakeTools(log, tools);
  const { metrics, modelStops, toolCalls } = fakeMetrics();
  const model = fakeModel(log, steps);
  const history: StoredMessage[] = [
    { role: "user", content: "go", seq: 1, createdAt: new Date(0).toISOString() },
    ...earlier,
  ];
  const input: LoopInput = {
    fence: FENCE,
    runId: RUN_ID,
    agent: agent({ tools: Object.keys(tools), ...options.agent }),
    model,
    history,
    signal: options.signal ?? new AbortController().signal,
  };
  const deps: AgentLoopDeps = {
    writes,
    tools: registry,
    metrics,
    sleep: async () => {},
    retryPolicy: { maxAttempts: 2, baseDelayMs: 1, maxDelayMs: 1 },
    ...(options.cancelled === undefined
      ? {}
      : {
          cancelled: async () => {
            log.push("cancel check");
            return options.cancelled === true;
          },
        }),
  };
  return {
    run: (more: Partial<LoopInput> = {}) => runAgentLoop({ ...input, ...more }, deps),
    log,
    appended,
    history,
    model,
    specsAsked,
    modelStops,
    toolCalls,
  };
}

const call = (id: string, name = "write_file", args: Record<string, unknown> = { path: "a.txt" }) => ({
  id,
  name,
  arguments: args,
});

describe("runAgentLoop", () => {
  it("appends the step (proving ownership), runs the tool, appends its result, then answers", async () => {
    const t = setup([
      { content: "writing", toolCalls: [call("c1")], stopReason: "tool_use" },
      { content: "Done", stopReason: "end_turn" },
    ]);
    const result = await t.run();
    expect(result.outcome).toBe("completed");
    expect(t.log).toEqual([
      "model",
      "append:assistant",
      "tool:write_file",
      "append:tool",
      "model",
      "append:assistant",
    ]);
    expect(t.appended.map((a) => [a.seq, a.message.role, a.tail])).toEqual([
      [2, "assistant", "tools_pending"],
      [3, "tool", "awaiting_model"],
      [4, "assistant", "completed"],
    ]);
    expect(t.appended.every((a) => a.runId === RUN_ID)).toBe(true);
    // The tool result's cursor names the step it answers.
    expect(t.appended[1]!.cursor).toEqual({ lastSeq: 2, lastStepSeq: 2 });
    expect(t.appended[1]!.message).toEqual({
      role: "tool",
      toolCallId: "c1",
      name: "write_file",
      content: "wrote a.txt",
      success: true,
    });
    // The second model call sees the tool result; the loop's history holds what it stored.
    expect(t.model.requests[1]!.history.map((m) => m.role)).toEqual(["user", "assistant", "tool"]);
    expect(t.history.map((m) => m.seq)).toEqual([1, 2, 3, 4]);
    expect(t.model.requests[0]!.tools.map((s) => s.name)).toEqual(["write_file"]);
    expect(t.modelStops).toEqual([{ stop_reason: "tool_use" }, { stop_reason: "end_turn" }]);
    expect(t.toolCalls).toEqual([{ tool: "write_file", outcome: "ok" }]);
  });

  it("appends results in call order with their success flags", async () => {
    const t = setup(
      [
        {
          content: "",
          toolCalls: [call("c1", "ok_tool"), call("c2", "throwing"), call("c3", "nowhere")],
          stopReason: "tool_use",
        },
        { content: "Done", stopReason: "end_turn" },
      ],
      {
        tools: {
          ok_tool: async () => "fine",
          throwing: async () => {
            throw new Error("disk full");
          },
        },
      },
    );
    const result = await t.run();
    expect(result.outcome).toBe("completed");
    const results = t.appended.filter((a) => a.message.role === "tool").map((a) => a.message as ToolMessage);
    expect(results).toEqual([
      { role: "tool", toolCallId: "c1", name: "ok_tool", content: "fine", success: true },
      { role: "tool", toolCallId: "c2", name: "throwing", content: "disk full", success: false },
      {
        role: "tool",
        toolCallId: "c3",
        name: "nowhere",
        content: 'no tool named "nowhere" is available to this agent',
        success: false,
      },
    ]);
    expect(t.appended.map((a) => a.tail)).toEqual([
      "tools_pending",
      "tools_pending",
      "tools_pending",
      "awaiting_model",
      "completed",
    ]);
    expect(t.toolCalls).toEqual([
      { tool: "ok_tool", outcome: "ok" },
      { tool: "throwing", outcome: "failed" },
      { tool: "unregistered", outcome: "failed" },
    ]);
    // Each call comes right after a fenced append: the step, or the previous call's result.
    // (The unknown tool never runs, so two calls ran.)
    const tools = t.log.flatMap((e, i) => (e.startsWith("tool:") ? [t.log[i - 1]] : []));
    expect(tools).toEqual(["append:assistant", "append:tool"]);
  });

  it("stops with max_turns after maxTurns model calls", async () => {
    const t = setup([{ content: "", toolCalls: [call("c1")], stopReason: "tool_use" }], {
      agent: { maxTurns: 3 },
    });
    // The fake model reuses id c1 each step; the loop does not care, each step is separate.
    const result = await t.run();
    expect(result.outcome).toBe("max_turns");
    expect(t.model.requests).toHaveLength(3);
    expect(t.log.filter((e) => e === "tool:write_file")).toHaveLength(3);
    expect(t.appended.at(-1)!.tail).toBe("awaiting_model");
  });

  it("counts a handed-back run's goal rounds against maxRounds (they are per run, like turns)", async () => {
    // The run's part before its hand-back (contracts §15): its input, then two goal rounds.
    const goal = { text: "finish", maxRounds: 3 };
    const t = setup([{ content: "not yet", stopReason: "end_turn" }], {
      earlier: [
        { role: "assistant", content: "not yet", stopReason: "end_turn" },
        { role: "internal", content: goalRoundText(goal, 1, 3) },
        { role: "assistant", content: "not yet", stopReason: "end_turn" },
        { role: "internal", content: goalRoundText(goal, 2, 3) },
      ],
    });
    expect(goalRoundsTaken(t.history)).toBe(2);
    const result = await t.run({ goal });
    expect(result.outcome).toBe("completed");
    // The model answers the last round, then the third (last) round, then ends: 2 calls.
    expect(t.model.requests).toHaveLength(2);
    const rounds = t.history.filter((m) => m.role === "internal").map((m) => m.content.split(":")[0]);
    expect(rounds).toEqual(["Goal (round 1 of 3)", "Goal (round 2 of 3)", "Goal (round 3 of 3)"]);
    // An earlier run's rounds, before this run's input, are not this run's.
    expect(goalRoundsTaken([...t.history, { role: "user", content: "again" }])).toBe(0);
  });

  it("continues paused steps up to pauseLimit, then ends paused", async () => {
    const t = setup([{ content: "thinking", stopReason: "paused" }], { agent: { pauseLimit: 2 } });
    const result = await t.run();
    expect(result.outcome).toBe("paused");
    expect(t.model.requests).toHaveLength(3);
    expect(t.appended.map((a) => a.tail)).toEqual(["paused", "paused", "paused"]);
    expect(t.modelStops).toEqual([
      { stop_reason: "paused" },
      { stop_reason: "paused" },
      { stop_reason: "paused" },
    ]);
  });

  it("ends paused at once with pauseLimit 0, and a tool step resets the pause count", async () => {
    const zero = setup([{ content: "", stopReason: "paused" }], { agent: { pauseLimit: 0 } });
    expect((await zero.run()).outcome).toBe("paused");
    expect(zero.model.requests).toHaveLength(1);

    const reset = setup(
      [
        { content: "", stopReason: "paused" },
        { content: "", toolCalls: [call("c1")], stopReason: "tool_use" },
        { content: "", stopReason: "paused" },
        { content: "done", stopReason: "end_turn" },
      ],
      { agent: { pauseLimit: 1 } },
    );
    expect((await reset.run()).outcome).toBe("completed");
    expect(reset.model.requests).toHaveLength(4);
  });

  it("a handed-back run goes on counting the pauses it took before its hand-back (contracts §15)", async () => {
    // A run handed back to wait for capacity right after its second pause (pauseLimit 2) is the
    // same request: the cap on consecutive pauses is not reset by the wait.
    const earlier: Message[] = [
      { role: "assistant", content: "", stopReason: "paused" },
      { role: "assistant", content: "", stopReason: "paused" },
    ];
    const t = setup([{ content: "", stopReason: "paused" }], { agent: { pauseLimit: 2 }, earlier });
    const history = t.history;
    // Its two model calls were both pauses; only the calls it made count (not an earlier run's).
    expect(pausesTaken(history, 2)).toBe(2);
    expect(pausesTaken(history, 1)).toBe(1);
    expect(pausesTaken(history, 0)).toBe(0);
    expect(pausesTaken([...history, { role: "user", content: "more" }], 5)).toBe(0);
    const result = await t.run({ pausesTaken: 2 });
    expect(result.outcome).toBe("paused");
    expect(t.model.requests).toHaveLength(1);
  });

  it.each([false, true])(
    "caps consecutive pauses only: a goal round between two pauses resets the count (deferLast %s)",
    async (deferLast) => {
      // resume-semantics §2: the runtime's cap is on *consecutive* pauses. A step that ended
      // its turn (answered by a goal round) breaks the run of pauses, as a tool step does.
      const t = setup(
        [
          { content: "", stopReason: "paused" },
          { content: "not yet", stopReason: "end_turn" },
          { content: "", stopReason: "paused" },
          { content: "GOAL_MET", stopReason: "end_turn" },
        ],
        { agent: { pauseLimit: 1 } },
      );
      const result = await t.run({ goal: { text: "finish", maxRounds: 3 }, deferLast });
      expect(result.outcome).toBe("completed");
      expect(t.model.requests).toHaveLength(4);
    },
  );

  it.each([
    ["interrupted", "interrupted", "interrupted", "interrupted"],
    ["max_output", "max_output", "max_output", "max_output"],
    ["refusal", "refused", "refused", "refusal"],
    ["context_full", "context_full", "context_full", "context_full"],
    ["something_new", "unknown_stop", "unknown_stop", "other"],
  ] as const)(
    "stop reason %s ends the run as %s after appending the step",
    async (stopReason, outcome, tail, label) => {
      const t = setup([
        { content: "partial", stopReason },
        { content: "never", stopReason: "end_turn" },
      ]);
      const result = await t.run();
      expect(result.outcome).toBe(outcome);
      expect(t.model.requests).toHaveLength(1);
      expect(t.appended).toHaveLength(1);
      expect(t.appended[0]!.message).toEqual({ role: "assistant", content: "partial", stopReason });
      expect(t.appended[0]!.tail).toBe(tail);
      expect(t.modelStops).toEqual([{ stop_reason: label }]);
    },
  );

  it("does not run tool calls carried by an abnormal stop", async () => {
    const t = setup([{ content: "cut", toolCalls: [call("c1")], stopReason: "max_output" }]);
    const result = await t.run();
    expect(result.outcome).toBe("max_output");
    expect(t.log).toEqual(["model", "append:assistant"]);
  });

  it("propagates a FencedError from an append and stops", async () => {
    const t = setup(
      [
        { content: "", toolCalls: [call("c1"), call("c2")], stopReason: "tool_use" },
        { content: "Done", stopReason: "end_turn" },
      ],
      { failAppend: 2 },
    );
    await expect(t.run()).rejects.toBeInstanceOf(FencedError);
    // The first tool ran and its result was refused; nothing ran after that.
    expect(t.log).toEqual(["model", "append:assistant", "tool:write_file", "append-fenced:tool"]);
  });

  it("propagates a FencedError from the first append (the model step)", async () => {
    const t = setup([{ content: "", toolCalls: [call("c1")], stopReason: "tool_use" }], { failAppend: 1 });
    await expect(t.run()).rejects.toBeInstanceOf(FencedError);
    expect(t.log).toEqual(["model", "append-fenced:assistant"]);
  });

  it("answers a call that never started as cancelled (spec: a cancel mid-tools leaves every call answered)", async () => {
    const controller = new AbortController();
    const t = setup(
      [
        {
          content: "",
          toolCalls: [call("c1")],
          stopReason: "tool_use",
          onStream: () => controller.abort(new Error("shutdown")),
        },
      ],
      { signal: controller.signal },
    );
    const result = await t.run();
    expect(result.outcome).toBe("cancelled");
    expect(t.log).toEqual(["model", "append:assistant", "append:tool"]);
    const last = t.appended.at(-1)!;
    expect(last.tail).toBe("awaiting_model");
    expect(last.message).toMatchObject({
      role: "tool",
      toolCallId: "c1",
      success: false,
      content: "Cancelled: the run was stopped before this tool started, so it did not run.",
    });
  });

  it("leaves a cancel during its last model call to the run's end: no cancel read of its own (its answer stored, hooks awaited)", async () => {
    // The last step appended on its own (a run whose hooks see it: no deferLast): a cancel whose
    // signal never came is read by the statement that ends the run (endRun: end-run.ts turns
    // the outcome to `cancelled`; hook-cancel.test.ts), not by one more read here.
    const t = setup([{ content: "Done", stopReason: "end_turn" }], { cancelled: true });
    expect((await t.run()).outcome).toBe("completed");
    expect(t.log).toEqual(["model", "append:assistant"]);
  });

  it("stops between tools when aborted by a running tool", async () => {
    const controller = new AbortController();
    const t = setup(
      [{ content: "", toolCalls: [call("c1", "first"), call("c2", "second")], stopReason: "tool_use" }],
      {
        signal: controller.signal,
        tools: {
          first: async () => {
            controller.abort(new Error("shutdown"));
            return "first done";
          },
          second: async () => "second done",
        },
      },
    );
    const result = await t.run();
    expect(result.outcome).toBe("cancelled");
    expect(t.log).toEqual(["model", "append:assistant", "tool:first", "append:tool", "append:tool"]);
    expect(t.appended.at(-1)!.message).toMatchObject({ toolCallId: "c2", success: false });
    expect(t.appended.at(-1)!.tail).toBe("awaiting_model");
  });

  it("ends cancelled without calling the model when aborted before the run", async () => {
    const controller = new AbortController();
    controller.abort();
    const t = setup([{ content: "x", stopReason: "end_turn" }], { signal: controller.signal });
    expect((await t.run()).outcome).toBe("cancelled");
    expect(t.model.requests).toHaveLength(0);
    expect(t.appended).toHaveLength(0);
  });

  it("sums usage across steps, and counts the steps with none reported (unknownSteps)", async () => {
    const t = setup([
      {
        content: "",
        toolCalls: [call("c1")],
        stopReason: "tool_use",
        usage: { inputTokens: 10, outputTokens: 3 },
      },
      { content: "no usage reported", toolCalls: [call("c2")], stopReason: "tool_use" },
      { content: "Done", stopReason: "end_turn", usage: { inputTokens: 25, outputTokens: 7 } },
    ]);
    const result = await t.run();
    // The step with no usage reported is counted as such: 35 + 10 tokens is not the whole run.
    expect(result).toEqual({
      outcome: "completed",
      usage: { inputTokens: 35, outputTokens: 10, unknownSteps: 1 },
    });
  });

  /** A run whose every model request throws `error` before any output, with `maxAttempts` per step. */
  async function failingRun(error: Error, maxAttempts: number) {
    const log: string[] = [];
    const t = setup([{ content: "x", stopReason: "end_turn" }]);
    const failing: ModelProvider = {
      // biome-ignore lint/correctness/useYield: fails before any output, by design
      async *stream() {
        log.push("model");
        throw error;
      },
    };
    const { writes, appended } = fakeWrites(log);
    const { metrics } = fakeMetrics();
    const result = await runAgentLoop(
      {
        fence: FENCE,
        runId: RUN_ID,
        agent: agent(),
        model: failing,
        history: t.history,
        signal: new AbortController().signal,
      },
      {
        writes,
        tools: fakeTools(log, {}).registry,
        metrics,
        sleep: async () => {},
        retryPolicy: { maxAttempts, baseDelayMs: 1, maxDelayMs: 1 },
      },
    );
    return { result, log, appended };
  }

  it("ends provider_error with the error when the model keeps failing, appending nothing", async () => {
    const { result, log, appended } = await failingRun(new Error("connection refused"), 2);
    expect(result).toEqual({
      outcome: "provider_error",
      error: "connection refused",
      usage: { inputTokens: 0, outputTokens: 0, unknownSteps: 0 },
    });
    expect(log).toEqual(["model", "model"]);
    expect(appended).toHaveLength(0);
  });

  it("ends provider_error marked rejected after one call when the provider refuses the request", async () => {
    const refused = new ProviderError("openai: 401 Incorrect API key provided", false, undefined, {
      status: 401,
    });
    const { result, log, appended } = await failingRun(refused, 4);
    expect(result).toEqual({
      outcome: "provider_error",
      error: "openai: 401 Incorrect API key provided",
      usage: { inputTokens: 0, outputTokens: 0, unknownSteps: 0 },
      rejected: true,
    });
    expect(log).toEqual(["model"]);
    expect(appended).toHaveLength(0);
  });

  it("ends invalid_agent before calling the model when a listed tool is not in this worker", async () => {
    const t = setup([{ content: "x", stopReason: "end_turn" }], {
      agent: { tools: ["write_file", "no_such_tool"] },
    });
    expect(await t.run()).toEqual({
      outcome: "invalid_agent",
      error: 'agent.tools[1]: no tool named "no_such_tool" is registered in this worker',
      usage: { inputTokens: 0, outputTokens: 0 },
    });
    expect(t.model.requests).toHaveLength(0);
    expect(t.appended).toHaveLength(0);
  });
});

describe("runAgentLoop: only the tools the agent lists (contracts.md §12)", () => {
  it("answers a call to a registered tool the agent does not list with a failed result, running nothing", async () => {
    const t = setup(
      [
        { content: "", toolCalls: [call("c1", "secret"), call("c2", "listed")], stopReason: "tool_use" },
        { content: "Done", stopReason: "end_turn" },
      ],
      {
        tools: { listed: async () => "listed ran", secret: async () => "secret ran" },
        agent: { tools: ["listed"] },
      },
    );
    expect((await t.run()).outcome).toBe("completed");
    // The model is offered only the listed tool, and only the listed tool runs.
    expect(t.model.requests[0]!.tools.map((s) => s.name)).toEqual(["listed"]);
    expect(t.log.filter((e) => e.startsWith("tool:"))).toEqual(["tool:listed"]);
    const results = t.appended.filter((a) => a.message.role === "tool").map((a) => a.message);
    expect(results).toEqual([
      {
        role: "tool",
        toolCallId: "c1",
        name: "secret",
        content: 'no tool named "secret" is available to this agent',
        success: false,
      },
      { role: "tool", toolCallId: "c2", name: "listed", content: "listed ran", success: true },
    ]);
    // "secret" is a name the operator registered, so it may be a label.
    expect(t.toolCalls).toEqual([
      { tool: "secret", outcome: "failed" },
      { tool: "listed", outcome: "ok" },
    ]);
  });

  it("with no tools listed, runs none of the registered ones", async () => {
    const t = setup(
      [
        { content: "", toolCalls: [call("c1")], stopReason: "tool_use" },
        { content: "Done", stopReason: "end_turn" },
      ],
      { agent: { tools: [] } },
    );
    expect((await t.run()).outcome).toBe("completed");
    expect(t.log).not.toContain("tool:write_file");
    expect(t.model.requests[0]!.tools).toEqual([]);
    expect(t.appended[1]!.message).toMatchObject({
      content: 'no tool named "write_file" is available to this agent',
      success: false,
    });
  });

  it("never uses a name the model made up as a metric label, also when the run is cancelled", async () => {
    const controller = new AbortController();
    const invented = 'x"} 1\nfleet_evil{a="b';
    const t = setup(
      [
        {
          content: "",
          toolCalls: [call("c1", invented), call("c2", "write_file"), call("c3", "made_up")],
          stopReason: "tool_use",
          onStream: () => controller.abort(new Error("shutdown")),
        },
      ],
      { signal: controller.signal },
    );
    expect((await t.run()).outcome).toBe("cancelled");
    expect(t.toolCalls).toEqual([
      { tool: "unregistered", outcome: "failed" },
      { tool: "write_file", outcome: "failed" },
      { tool: "unregistered", outcome: "failed" },
    ]);
  });
});
