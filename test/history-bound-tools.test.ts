/**
 * The history bound (MAX_HISTORY_BYTES, history-bound.ts) holds within one step: its tool
 * results count against it as they are appended. A step of 40 calls to a tool answering 1 MB
 * each grew the history to 40 MB in one step, past the bound a message is refused at and that
 * an import is held to. Now the results fill the room left, the one that does not fit is cut
 * with a note saying so, the calls after it are not run (each answered, success false, as not
 * run), and the run ends `budget_exhausted` with the session parked `budget_exhausted: history`:
 * every call answered once (resume-semantics §3), nothing lost, the tools that ran named as run.
 * A real `fleet worker` process with a user tool module.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { MAX_HISTORY_BYTES } from "../src/producer/request-limits.js";
import type { StoredMessage } from "../src/shared/messages.js";
import { historyBytes } from "../src/shared/store/history-bytes.js";
import { createFleetEnv, type FleetEnv, ROOT } from "./support/fleet-env.js";

const CALLS = 40;
const RESULT = 1_000_000;

describe("a step's tool results count against the history bound", () => {
  let fleet: FleetEnv;
  let client: FleetClient;

  beforeAll(async () => {
    fleet = await createFleetEnv("historytools");
    client = (await fleet.startApi()).client;
    await fleet.spawnWorker({}, ["--tools", join(ROOT, "test/fixtures/big-result-tool.ts")]);
  }, 120_000);
  afterAll(async () => fleet?.close());

  it("fills the room left, cuts the result that does not fit, runs no call after it, and parks naming the bound", async () => {
    const calls = Array.from({ length: CALLS }, (_, i) => ({
      id: `c${i}`,
      name: "big",
      arguments: { chars: RESULT },
    }));
    const { id } = await client.createSession({
      agent: {
        model: { provider: "scripted", steps: [{ toolCalls: calls }, { text: "done" }] },
        tools: ["big"],
        maxTurns: 5,
      },
    });
    const { runId } = await client.send(id, "go");
    const run = await client.waitForRun(runId, { timeoutMs: 120_000 });
    const messages: StoredMessage[] = [];
    for await (const m of client.messages(id, { pageSize: 10 })) messages.push(m);
    const [row] = await fleet.database.sql<{ b: string }[]>`
      select history_bytes::text as b from sessions where id = ${id}`;
    expect(Number(row!.b)).toBeLessThanOrEqual(MAX_HISTORY_BYTES);
    expect(historyBytes(messages)).toBe(Number(row!.b));

    // One step, then exactly one result per call, in the calls' order.
    expect(messages.map((m) => m.role)).toEqual(["user", "assistant", ...calls.map(() => "tool")]);
    const results = messages.slice(2).map((m) => m as Extract<StoredMessage, { role: "tool" }>);
    expect(results.map((r) => r.toolCallId)).toEqual(calls.map((c) => c.id));
    const whole = results.filter((r) => r.success && r.content.length === RESULT);
    const cut = results[whole.length]!;
    // As many whole results as fit, then one cut with a note, then the calls not run.
    expect(whole.length).toBe(Math.floor(MAX_HISTORY_BYTES / RESULT));
    // The room was filled: less than the short answers of the calls after the cut one is left.
    expect(MAX_HISTORY_BYTES - Number(row!.b)).toBeLessThan(1_000);
    expect(cut.success).toBe(true);
    expect(cut.content).toMatch(
      /^y+\n\[cut: the session's history had room for .* of the tool's 1,000,000 characters/,
    );
    // The tool ran for the whole results and the cut one, and for no call after them.
    const ran = (await readFile(join(fleet.config.toolDir, "big-calls.log"), "utf8")).trimEnd().split("\n");
    expect(ran).toEqual(calls.slice(0, whole.length + 1).map((c) => c.id));
    const notRun = results.slice(whole.length + 1);
    expect(notRun.length).toBeGreaterThan(0);
    for (const r of notRun) {
      expect(r.success).toBe(false);
      expect(r.content).toMatch(/^Not run: the session's history is full/);
    }

    expect(run.endedReason).toBe("budget_exhausted");
    const session = await client.getSession(id, { limit: 1 });
    expect(session.parkedReason).toMatch(/^budget_exhausted: history: /);
    // Every call answered: a resume would call the model, not recover tools.
    expect(await client.resumePoint(id)).toMatchObject({ resumable: true, kind: "call_model" });
  }, 180_000);
});
