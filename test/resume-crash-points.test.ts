/**
 * Workers killed (SIGKILL) at chosen points of a model call, against the real fleet: the API,
 * a sweeper, `fleet worker` children and a fake OpenAI-compatible server that streams slowly
 * (test/support/fake-openai.ts), so what each resumed request sends is seen on the wire.
 *
 * resume-semantics §2 and §5: a response streaming when its process died is not kept (only a
 * stream *fault* keeps its partial, as `interrupted`); the history then ends with what the
 * model was answering, and the resume is `call_model`, adding nothing. A resume that is cut
 * short in turn is resumed again from where the history ends: after a crash inside a
 * `retry_response` resume, the retry instruction is already stored, so the next resume is
 * `call_model` and sends it once — not a second instruction. Likewise after a crash inside a
 * `recover_tools` resume: the interrupted call's result is already stored, so the next resume
 * answers it no second time.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { loadConfig } from "../src/shared/config.js";
import { RETRY_RESPONSE_TEXT } from "../src/shared/resume-plan.js";
import { type RunningSweeper, startSweeper } from "../src/sweeper/sweeper-process.js";
import { type FakeOpenAI, startFakeOpenAI } from "./support/fake-openai.js";
import { createFleetEnv, type FleetEnv, seqsOf, type WorkerProcess, waitFor } from "./support/fleet-env.js";
import { CRASH_HISTORY } from "./support/histories.js";
import { INTERRUPTED_TEXT } from "./support/sleepy-sessions.js";

const KEY = "test-key";
/** Text that streams one piece a second: the worker is killed while it streams. */
const SLOW = { text: ["Half ", "an ", "answer ", "that ", "never ", "ends."], chunkDelayMs: 1_000 };

describe("a worker killed while the model answers", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let sweeper: RunningSweeper;
  let fake: FakeOpenAI;

  beforeAll(async () => {
    fleet = await createFleetEnv("crashpoints", { env: { FLEET_ALLOWED_BASE_URLS: "http://127.0.0.1" } });
    ({ client } = await fleet.startApi());
    sweeper = await startSweeper({ ...loadConfig(fleet.env), logLevel: "silent" }, { serveMetrics: false });
  });
  /** Each test's workers: stopped after it, so the next test's victim is its only worker. */
  const workers: WorkerProcess[] = [];
  afterEach(async () => {
    for (const w of workers.splice(0)) {
      w.child.kill("SIGTERM");
      await w.exited;
    }
    await fake?.close();
  });
  afterAll(async () => {
    await sweeper?.stop();
    await fleet?.close();
  });

  async function worker(): Promise<WorkerProcess> {
    const spawned = await fleet.spawnWorker({ OPENAI_API_KEY: KEY });
    workers.push(spawned);
    return spawned;
  }

  /** A session on the fake server; `messages`: a history to import (it runs nothing). */
  async function session(messages?: typeof CRASH_HISTORY): Promise<string> {
    fake = await startFakeOpenAI();
    const { id } = await client.createSession({
      agent: { model: { provider: "openai", model: "gpt-test", baseUrl: fake.url }, tools: ["write_file"] },
      ...(messages ? { messages } : {}),
    });
    return id;
  }

  /** Kills `victim` once `requests` requests reached the server and text of the last one streamed. */
  async function killWhileStreaming(id: string, victim: WorkerProcess, requests: number): Promise<void> {
    await waitFor(() => fake.requests.length === requests, 20_000, `request ${requests}`);
    const controller = new AbortController();
    for await (const event of client.events(id, { signal: controller.signal })) {
      if (event.type === "MESSAGE_DELTA" && event.data.runId === (await lastRunId(id))) break;
    }
    controller.abort();
    victim.child.kill("SIGKILL");
    await victim.exited;
  }

  async function lastRunId(id: string): Promise<string | undefined> {
    const { runs } = await client.getSession(id);
    return runs.find((r) => r.status === "running")?.id;
  }

  async function completed(id: string): Promise<void> {
    await waitFor(
      async () => (await client.getSession(id)).status === "completed",
      40_000,
      "the session completed",
    );
  }

  it("keeps nothing of the streaming text; the sweeper resumes call_model and sends the history as it was", async () => {
    const id = await session();
    fake.enqueue(SLOW);
    fake.enqueue({ text: ["Whole ", "answer."] });
    const victim = await worker();
    await client.send(id, "Question?");
    await killWhileStreaming(id, victim, 1);

    // Nothing of the step that was streaming is stored: the history ends with the question.
    const killed = await client.getSession(id);
    expect(killed.messages.map((m) => m.role)).toEqual(["user"]);

    await worker();
    await completed(id);
    const done = await client.getSession(id);
    expect(seqsOf(done.messages)).toEqual([1, 2]);
    expect(done.messages.at(-1)).toMatchObject({
      role: "assistant",
      content: "Whole answer.",
      stopReason: "end_turn",
    });
    // The resumed request is the first one again: nothing was added, nothing of the partial.
    expect(fake.requests).toHaveLength(2);
    expect(fake.requests[1]!.body.messages).toEqual([{ role: "user", content: "Question?" }]);
    expect(fake.requests[1]!.body.messages).toEqual(fake.requests[0]!.body.messages);
    const runs = done.runs;
    expect(runs.map((r) => [r.kind, r.endedReason])).toEqual([
      ["run", "crashed"],
      ["resume", "completed"],
    ]);
    expect(runs[1]).toMatchObject({ resumeKind: "call_model" });
    expect(["sweeper", "worker"]).toContain(runs[1]!.trigger);
  }, 90_000);

  it("a crash inside a retry_response resume: the next resume is call_model, and the retry instruction goes once", async () => {
    const id = await session();
    // A stream fault after "The answer ": kept as an interrupted response; the sweeper resumes it.
    fake.enqueue({ text: ["The answer ", "is forty", "-two."], cutAfter: 1 });
    fake.enqueue(SLOW);
    fake.enqueue({ text: ["The answer is forty-two."] });
    const victim = await worker();
    await client.send(id, "What is the answer?");
    await killWhileStreaming(id, victim, 2);

    const killed = await client.getSession(id);
    expect(killed.messages.map((m) => [m.role, m.content])).toEqual([
      ["user", "What is the answer?"],
      ["assistant", "The answer "],
      ["internal", RETRY_RESPONSE_TEXT],
    ]);

    await worker();
    await completed(id);
    const done = await client.getSession(id);
    expect(seqsOf(done.messages)).toEqual([1, 2, 3, 4]);
    expect(done.messages.map((m) => m.role)).toEqual(["user", "assistant", "internal", "assistant"]);
    expect(done.messages.at(-1)).toMatchObject({
      content: "The answer is forty-two.",
      stopReason: "end_turn",
    });
    const retried = [
      { role: "user", content: "What is the answer?" },
      { role: "assistant", content: "The answer " },
      { role: "user", content: RETRY_RESPONSE_TEXT },
    ];
    expect(fake.requests).toHaveLength(3);
    expect(fake.requests[1]!.body.messages).toEqual(retried);
    expect(fake.requests[2]!.body.messages).toEqual(retried);
    const runs = done.runs;
    expect(runs.map((r) => [r.kind, r.resumeKind, r.endedReason])).toEqual([
      ["run", null, "interrupted"],
      ["resume", "retry_response", "crashed"],
      ["resume", "call_model", "completed"],
    ]);
  }, 90_000);

  it("a crash inside a recover_tools resume: the next resume is call_model, and b is answered once", async () => {
    // §7.2's history: write_file a and b asked for, only a's result stored.
    const id = await session(CRASH_HISTORY);
    fake.enqueue(SLOW);
    fake.enqueue({ text: ["1 tool was interrupted"] });
    const victim = await worker();
    const { kind } = await client.resume(id);
    expect(kind).toBe("recover_tools");
    await killWhileStreaming(id, victim, 1);

    // The resume stored b's result, byte for byte the §3 text, before it called the model.
    const killed = await client.getSession(id);
    expect(killed.messages.slice(2).map(({ seq, createdAt, ...m }) => m)).toEqual([
      { role: "tool", toolCallId: "a", name: "write_file", content: "wrote a.txt", success: true },
      { role: "tool", toolCallId: "b", name: "write_file", content: INTERRUPTED_TEXT, success: false },
    ]);
    expect(Buffer.from(killed.messages[3]!.content)).toEqual(Buffer.from(INTERRUPTED_TEXT));

    await worker();
    await completed(id);
    const done = await client.getSession(id);
    expect(seqsOf(done.messages)).toEqual([1, 2, 3, 4, 5]);
    expect(done.messages.map((m) => m.role)).toEqual(["user", "assistant", "tool", "tool", "assistant"]);
    expect(done.messages.at(-1)).toMatchObject({ content: "1 tool was interrupted", stopReason: "end_turn" });
    // Both requests carried a's result and b's interrupted one, once each: the second resume
    // added nothing, and neither write_file ran (no file of the crash history was written).
    expect(fake.requests).toHaveLength(2);
    expect(fake.requests[1]!.body.messages).toEqual(fake.requests[0]!.body.messages);
    const results = (
      fake.requests[1]!.body.messages as { role: string; tool_call_id?: string; content?: string }[]
    ).filter((m) => m.role === "tool");
    expect(results.map((m) => m.tool_call_id)).toEqual(["a", "b"]);
    expect(results[1]!.content).toContain(INTERRUPTED_TEXT);
    expect(existsSync(join(fleet.config.toolDir, "a.txt"))).toBe(false);
    expect(existsSync(join(fleet.config.toolDir, "b.txt"))).toBe(false);
    const runs = done.runs;
    expect(runs.map((r) => [r.kind, r.trigger, r.resumeKind, r.endedReason])).toEqual([
      ["resume", "api", "recover_tools", "crashed"],
      ["resume", runs[1]!.trigger, "call_model", "completed"],
    ]);
    expect(["sweeper", "worker"]).toContain(runs[1]!.trigger);
  }, 90_000);
});
