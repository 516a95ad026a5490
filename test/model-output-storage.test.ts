/**
 * contracts.md §12 against a real Postgres (a fresh database for this file): model output
 * with NUL bytes or lone surrogates — which `text` and `jsonb` reject — is stored with those
 * code points replaced by U+FFFD, so nothing a model (or a tool) sends can make an append fail.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseAgentConfig } from "../src/shared/agent-config.js";
import type { AssistantMessage, Message, StoredMessage } from "../src/shared/messages.js";
import { FencedWrites } from "../src/shared/store/fenced-writes.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { runAgentLoop } from "../src/worker/agent-loop.js";
import { callModel } from "../src/worker/call-model.js";
import type { AgentLoopDeps } from "../src/worker/loop-types.js";
import type { ModelEvent, ModelProvider } from "../src/worker/models/provider.js";
import { ScriptedModel } from "../src/worker/models/scripted.js";
import { ToolRegistry } from "../src/worker/tools/registry.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const R = "\uFFFD";
const AGENT = parseAgentConfig({ model: { provider: "scripted", steps: [{ text: "hi" }] }, tools: ["echo"] });

let fleet: FleetEnv;
let queries: SessionQueries;
let writes: FencedWrites;

beforeAll(async () => {
  fleet = await createFleetEnv("modeloutput");
  queries = new SessionQueries(fleet.database);
  writes = new FencedWrites(fleet.database);
});
afterAll(async () => fleet?.close());

/** A session holding one user message, claimed: its fence and the stored history. */
async function startedSession(): Promise<{
  fence: { sessionId: string; epoch: number };
  stored: StoredMessage[];
}> {
  const { id } = await queries.createSession({ agent: AGENT });
  const claim = await writes.claimSession(id, "w1");
  const fence = { sessionId: id, epoch: claim!.epoch };
  const stored = await writes.append(
    fence,
    { lastSeq: 0, lastStepSeq: null },
    null,
    [user],
    "awaiting_model",
  );
  return { fence, stored };
}

const user: Message = { role: "user", content: "go" };
const plain = ({ seq: _s, createdAt: _c, ...m }: StoredMessage) => m;
const noSleep = async () => {};

/** A provider that plays the given events once per call. */
function playing(events: ModelEvent[]): ModelProvider {
  return {
    async *stream() {
      for (const event of events) yield event;
    },
  };
}

/** The assistant message callModel makes of what a provider sent. */
async function stepOf(model: ModelProvider, history: Message[] = [user]): Promise<AssistantMessage> {
  const step = await callModel(
    model,
    { sessionId: "s", history, tools: [], signal: new AbortController().signal },
    { sleep: noSleep },
  );
  if (!step.ok) throw new Error(step.error);
  return step.message;
}

const NASTY: ModelEvent[] = [
  { type: "text", delta: "bin\u0000ary, half a pair \uD83D, a low half \uDE00, whole 😀" },
  {
    type: "tool_call",
    call: {
      id: "call\u0000x",
      name: "echo\uD800",
      arguments: { "te\u0000xt": "a\u0000b", nested: [{ "\uDC00": "\uD83D" }, "😀", 1, null] },
    },
  },
  { type: "done", stopReason: "odd\u0000stop" },
];

describe("what Postgres would reject", () => {
  it("unsanitised, NUL or a lone surrogate makes the append fail and stores nothing", async () => {
    for (const content of ["bin\u0000ary", "abc\uD83D"]) {
      const { fence } = await startedSession();
      const raw: Message = { role: "assistant", content, stopReason: "end_turn" };
      const error = await writes
        .append(fence, { lastSeq: 1, lastStepSeq: null }, null, [raw], "awaiting_model")
        .then(
          () => undefined,
          (e: { name?: string; message?: string; detail?: string }) => e,
        );
      // Postgres itself refuses it ("unsupported Unicode escape sequence", "… low surrogate …").
      expect(error?.name).toBe("PostgresError");
      expect(`${error?.message} ${error?.detail}`).toMatch(/unicode|surrogate/i);
      expect(await queries.loadHistory(fence.sessionId)).toHaveLength(1);
    }
  });
});

describe("model output through callModel is stored with U+FFFD", () => {
  it("text, tool call ids, names, arguments (keys too) and the stop reason", async () => {
    const { fence } = await startedSession();
    const message = await stepOf(playing(NASTY));
    await writes.append(fence, { lastSeq: 1, lastStepSeq: null }, null, [message], "awaiting_model");
    const history = (await queries.loadHistory(fence.sessionId)).map(plain);
    expect(history).toEqual([
      user,
      {
        role: "assistant",
        content: `bin${R}ary, half a pair ${R}, a low half ${R}, whole 😀`,
        toolCalls: [
          {
            id: `call${R}x`,
            name: `echo${R}`,
            arguments: { [`te${R}xt`]: `a${R}b`, nested: [{ [R]: R }, "😀", 1, null] },
          },
        ],
        stopReason: `odd${R}stop`,
        usage: null,
      },
    ]);
  });

  it('the scripted step {"text":"abc😀xyz","fault":"stream_cut"} is stored interrupted as "abc\\uFFFD"', async () => {
    const { fence } = await startedSession();
    const model = new ScriptedModel([{ text: "abc😀xyz", fault: "stream_cut" }], {
      faults: { increment: async () => 1 },
      sleep: noSleep,
    });
    const message = await stepOf(model);
    await writes.append(fence, { lastSeq: 1, lastStepSeq: null }, null, [message], "awaiting_model");
    const [, stored] = await queries.loadHistory(fence.sessionId);
    expect(plain(stored!)).toEqual({
      role: "assistant",
      content: `abc${R}`,
      stopReason: "interrupted",
      usage: null,
    });
  });
});

describe("a run of the agent loop", () => {
  it("stores the model's steps and a tool's result with U+FFFD and completes", async () => {
    const { fence, stored } = await startedSession();
    const { run } = await queries.createRun({
      sessionId: fence.sessionId,
      kind: "run",
      trigger: "api",
      input: "go",
    });
    let calls = 0;
    const model: ModelProvider = {
      async *stream() {
        calls++;
        if (calls === 1) {
          yield { type: "tool_call", call: { id: "c1", name: "echo", arguments: { text: "x\u0000" } } };
          yield { type: "done", stopReason: "tool_use" };
        } else {
          yield { type: "text", delta: "done\u0000" };
          yield { type: "done", stopReason: "end_turn" };
        }
      },
    };
    const tools = new ToolRegistry().register({
      name: "echo",
      description: "Echoes with a NUL and a lone low surrogate",
      parameters: { type: "object" },
      run: async (args) => `${String(args.text)}|\u0000|\uDE00`,
    });
    const counter = { inc: () => {} };
    const deps: AgentLoopDeps = {
      writes,
      tools,
      metrics: { modelStops: counter, toolCalls: counter } as unknown as AgentLoopDeps["metrics"],
      sleep: noSleep,
    };
    const result = await runAgentLoop(
      { fence, runId: run.id, agent: AGENT, model, history: stored, signal: new AbortController().signal },
      deps,
    );
    expect(result.error).toBeUndefined();
    expect(result.outcome).toBe("completed");
    const history = (await queries.loadHistory(fence.sessionId)).map(plain);
    expect(history).toEqual([
      user,
      {
        role: "assistant",
        content: "",
        toolCalls: [{ id: "c1", name: "echo", arguments: { text: `x${R}` } }],
        stopReason: "tool_use",
        usage: null,
      },
      { role: "tool", toolCallId: "c1", name: "echo", content: `x${R}|${R}|${R}`, success: true },
      { role: "assistant", content: `done${R}`, stopReason: "end_turn", usage: null },
    ]);
  });
});
