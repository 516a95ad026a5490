/**
 * A long session's resume point (`GET /v1/sessions/:id/resume-point`, an explicit resume) and
 * an imported page's check read the history's tail, from its last assistant message, when the
 * stored tail state says the rest is well formed: they read the whole history's shape, 20,000
 * index entries of `messages` for a session of 20,000. Counted in index entries read
 * or rows read (Postgres's statistics); the answers are those of `resumePoint` over the whole
 * history.
 */
import { describe, expect, it } from "vitest";
import { parseAgentConfig } from "../src/shared/agent-config.js";
import type { Message } from "../src/shared/messages.js";
import { resumePoint, toResumePointJson } from "../src/shared/resume-point.js";
import { readHistoryShape } from "../src/shared/store/history-reads.js";
import { storedHistory } from "./support/histories.js";
import { queriesEnvForFile } from "./support/queries-env.js";
import { messageIndexReads } from "./support/stat-reads.js";

const AGENT = parseAgentConfig({ model: { provider: "scripted", steps: [{ text: "hi" }] } });
const BIG = 1 << 30;

const env = queriesEnvForFile("resume-point-tail");

const plain = (messages: readonly Message[]): Message[] =>
  messages.map(
    ({ seq: _s, createdAt: _c, ...m }: Message & { seq?: number; createdAt?: string }) => m as Message,
  );

/** A session of 20,000 imported messages (two pages of 10,000), its statistics taken. */
async function longSession(): Promise<string> {
  const { id } = await env.queries.createSession({ agent: AGENT, messages: plain(storedHistory(10_000)) });
  await env.queries.appendImported("default", id, 10_000, plain(storedHistory(10_000, 10_000)), BIG);
  await env.fleet.database.sql`analyze messages`;
  return id;
}

describe("a long session's resume point", () => {
  it("is decided from its tail, as resumePoint over the whole decides it", async () => {
    const id = await longSession();
    // A step asking for two tools, one answered: recover_tools with the other.
    const calls = [
      { id: "c1", name: "read_file", arguments: { path: "a" } },
      { id: "c2", name: "read_file", arguments: { path: "b" } },
    ];
    const page: Message[] = [
      { role: "user", content: "more" },
      { role: "assistant", content: "", stopReason: "tool_use", toolCalls: calls },
      { role: "tool", toolCallId: "c1", name: "read_file", content: "x", success: true },
    ];
    const imported = await messageIndexReads(env.db, () =>
      env.queries.appendImported("default", id, 20_000, page, BIG),
    );
    const point = await env.queries.resumePoint(id);
    const read = await messageIndexReads(env.db, () => env.queries.resumePoint(id));
    expect(point).toEqual(toResumePointJson(resumePoint(await readHistoryShape(env.db.sql, id))));
    expect(point).toMatchObject({ kind: "recover_tools", unansweredToolCalls: [calls[1]] });
    // Before: the whole history's shape, 20,000 rows or entries (40,000 with the import's byte
    // count, which read every message too until the session's row kept it: history-bytes.ts).
    expect(read.index + read.seq).toBeLessThan(50);
    expect(imported.index + imported.seq).toBeLessThan(50);
    const [session] = await env.fleet.database.sql<
      { tail_state: string }[]
    >`select tail_state from sessions where id = ${id}`;
    expect(session!.tail_state).toBe("tools_pending");
  }, 120_000);

  it("names a duplicate result after the stored tail by its seq, and a malformed history's problem whole", async () => {
    const id = await longSession();
    const step: Message = {
      role: "assistant",
      content: "",
      stopReason: "tool_use",
      toolCalls: [{ id: "d1", name: "read_file", arguments: {} }],
    };
    const result: Message = {
      role: "tool",
      toolCallId: "d1",
      name: "read_file",
      content: "x",
      success: true,
    };
    await env.queries.appendImported(
      "default",
      id,
      20_000,
      [{ role: "user", content: "go" }, step, result],
      BIG,
    );
    await expect(env.queries.appendImported("default", id, 20_003, [result], BIG)).rejects.toThrow(
      /already has a result \(the stored message with seq 20003\)/,
    );

    // A result answering no call, then more: malformed from there on, its detail read whole.
    const stray: Message = { role: "tool", toolCallId: "zz", name: "read_file", content: "x", success: true };
    await env.queries.appendImported("default", id, 20_003, [stray, { role: "user", content: "on" }], BIG);
    const point = await env.queries.resumePoint(id);
    expect(point).toEqual(toResumePointJson(resumePoint(await readHistoryShape(env.db.sql, id))));
    expect(point).toMatchObject({
      resumable: false,
      reason: "malformed",
      detail: expect.stringContaining("messages[20003]"),
    });
  }, 120_000);
});
