/**
 * The stored count of a session's history bytes (`sessions.history_bytes`, store/history-bytes.ts):
 * an imported page's size check (`maxHistoryBytes`) adds the page to it, where it summed every
 * stored message at each page (n²/2 rows read to import n messages in pages). Every statement
 * that stores messages keeps it equal to the sum over the stored history; rows stored by a
 * writer that does not keep it (an older release) are counted by the next page's check.
 */
import { describe, expect, it } from "vitest";
import { parseAgentConfig } from "../src/shared/agent-config.js";
import { ValidationError } from "../src/shared/errors.js";
import type { Message } from "../src/shared/messages.js";
import { FencedWrites } from "../src/shared/store/fenced-writes.js";
import { historyBytes } from "../src/shared/store/history-bytes.js";
import { storedHistory } from "./support/histories.js";
import { queriesEnvForFile } from "./support/queries-env.js";
import { messageIndexReads } from "./support/stat-reads.js";

const AGENT = parseAgentConfig({ model: { provider: "scripted", steps: [{ text: "hi" }] } });
const BIG = 1 << 30;

const env = queriesEnvForFile("history-bytes");

const plain = (messages: readonly Message[]): Message[] =>
  messages.map(
    ({ seq: _s, createdAt: _c, ...m }: Message & { seq?: number; createdAt?: string }) => m as Message,
  );

/** What the session's row counts, and the same measure over its stored history as read back. */
async function counts(id: string) {
  const [row] = await env.fleet.database.sql<{ bytes: string; upto: number; last_seq: number }[]>`
    select history_bytes::text as bytes, history_bytes_seq as upto, last_seq from sessions where id = ${id}`;
  return {
    stored: Number(row!.bytes),
    upTo: row!.upto,
    lastSeq: row!.last_seq,
    real: historyBytes(await env.queries.loadHistory(id)),
  };
}

async function expectCounted(id: string): Promise<void> {
  const c = await counts(id);
  expect({ stored: c.stored, upTo: c.upTo }).toEqual({ stored: c.real, upTo: c.lastSeq });
}

const step = (text: string, ...calls: string[]): Message => ({
  role: "assistant",
  content: text,
  ...(calls.length > 0
    ? {
        toolCalls: calls.map((id) => ({
          id,
          name: "write_file",
          arguments: { path: `${id}.txt`, n: [1.5, "ü"] },
        })),
      }
    : {}),
  stopReason: calls.length > 0 ? "tool_use" : "end_turn",
  usage: { inputTokens: 3, outputTokens: 4 },
  providerState: { openai: { reasoning: [{ id: "rs_1", encrypted_content: "x".repeat(300) }] } },
});
const result = (id: string): Message => ({
  role: "tool",
  toolCallId: id,
  name: "write_file",
  content: `wrote ${id} — 🚀`,
  success: true,
});

describe("an imported page's size check", () => {
  it("reads the stored count, not every stored message: a page after 20,000 messages reads fewer than 50 rows", async () => {
    const { id } = await env.queries.createSession({ agent: AGENT, messages: plain(storedHistory(10_000)) });
    await env.queries.appendImported("default", id, 10_000, plain(storedHistory(10_000, 10_000)), BIG);
    await env.fleet.database.sql`analyze messages`;
    const page: Message[] = [{ role: "user", content: "more" }];
    const read = await messageIndexReads(env.db, () =>
      env.queries.appendImported("default", id, 20_000, page, BIG),
    );
    // Before: 20,000 and more (the sum of every stored message's bytes), page after page.
    expect(read.index + read.seq).toBeLessThan(50);
    await expectCounted(id);
  }, 120_000);

  it("still bounds the whole history: a page that would pass the bound by one byte is refused", async () => {
    const first = plain(storedHistory(8, 0, { varied: true }));
    const { id } = await env.queries.createSession({ agent: AGENT, messages: first });
    const page = plain(storedHistory(8, 8, { varied: true }));
    const limit = historyBytes(first) + historyBytes(page);
    await expect(env.queries.appendImported("default", id, 8, page, limit - 1)).rejects.toThrow(
      ValidationError,
    );
    await expect(env.queries.appendImported("default", id, 8, page, limit)).resolves.toEqual({ lastSeq: 16 });
    await expectCounted(id);
  });

  it("counts what a writer that keeps no count stored (an older release) before it adds the page", async () => {
    const { id } = await env.queries.createSession({
      agent: AGENT,
      messages: [{ role: "user", content: "hi" }],
    });
    // An older API's page: messages stored, last_seq moved, the count left where it was.
    const older = "o".repeat(1_000);
    await env.fleet.database.sql`
      insert into messages (session_id, seq, role, content) values (${id}, 2, 'user', ${older})`;
    await env.fleet.database.sql`update sessions set last_seq = 2 where id = ${id}`;
    expect(await counts(id)).toMatchObject({ stored: 2, upTo: 1, lastSeq: 2 });
    const page: Message[] = [{ role: "user", content: "abc" }];
    // Counted with them: 2 + 1,000 + 3 bytes; without them the page would pass a bound of 1,004.
    await expect(env.queries.appendImported("default", id, 2, page, 1_004)).rejects.toThrow(/about/);
    await expect(env.queries.appendImported("default", id, 2, page, 1_005)).resolves.toEqual({ lastSeq: 3 });
    await expectCounted(id);
  });
});

describe("what an unpaged read answers (SessionQueries.answerBytes, a big answer's place)", () => {
  const users = (from: number, sizes: number[]): Message[] =>
    sizes.map((size, i) => ({ role: "user", content: `${from + i}`.padEnd(size, "x") }));
  const answerBytes = async (id: string, afterSeq: number, enough: number) =>
    env.queries.answerBytes((await env.queries.getSession(id))!, afterSeq, enough);

  it("is the count for the whole or a small session, and the bytes after afterSeq from `enough` on", async () => {
    const sizes = [500, 20, 7_000, 30, 40];
    const { id } = await env.queries.createSession({ agent: AGENT, messages: users(1, sizes) });
    expect(await answerBytes(id, 0, 1)).toBe(7_590);
    // Below `enough`, the count bounds any part: nothing else is read.
    expect(await answerBytes(id, 3, 10_000)).toBe(7_590);
    expect(await answerBytes(id, 2, 1)).toBe(7_070);
    expect(await answerBytes(id, 3, 1)).toBe(70);
    expect(await answerBytes(id, 5, 1)).toBe(0);
  });

  it("counts what the stored count leaves out: a row from before migration 0024, an older writer's appends", async () => {
    const sizes = [500, 20, 7_000, 30, 40];
    const { id } = await env.queries.createSession({ agent: AGENT, messages: users(1, sizes) });
    // A row from before 0024: its columns' defaults count nothing of its 7,590 bytes.
    await env.fleet.database
      .sql`update sessions set history_bytes = 0, history_bytes_seq = 0 where id = ${id}`;
    expect([await answerBytes(id, 0, 1 << 20), await answerBytes(id, 2, 1 << 20)]).toEqual([7_590, 7_070]);
    // Counted up to seq 2 (520 bytes), then an older release's writer stored 3 to 5 uncounted.
    await env.fleet.database
      .sql`update sessions set history_bytes = 520, history_bytes_seq = 2 where id = ${id}`;
    expect([await answerBytes(id, 0, 1 << 20), await answerBytes(id, 1, 1 << 20)]).toEqual([7_590, 7_090]);
  });

  it("reads only a poll's tail: the last 2 of 20,000 messages read fewer than 50 rows", async () => {
    const { id } = await env.queries.createSession({ agent: AGENT, messages: plain(storedHistory(10_000)) });
    await env.queries.appendImported("default", id, 10_000, plain(storedHistory(10_000, 10_000)), BIG);
    await env.fleet.database.sql`analyze messages`;
    const tail = historyBytes(plain(await env.queries.loadHistory(id, 19_998)));
    let bytes = 0;
    const read = await messageIndexReads(env.db, async () => {
      bytes = await answerBytes(id, 19_998, 1);
    });
    expect(read.index + read.seq).toBeLessThan(50);
    // Postgres sums tool calls and provider state as jsonb's text: a few bytes more.
    expect(tail).toBeGreaterThan(0);
    expect(bytes).toBeGreaterThanOrEqual(tail);
    expect(bytes).toBeLessThan(tail + 100);
  }, 120_000);
});

describe("the stored count", () => {
  it("equals the sum over the stored history after creation, a batch, imports, a claim's start, appends alone and grouped, a run's start and end", async () => {
    const grouped = new FencedWrites(env.fleet.database);
    const alone = new FencedWrites(env.fleet.database, { groupWrites: false });
    const created = await env.queries.createSessions([
      { agent: AGENT, input: "go — ü" },
      { agent: AGENT, input: "two 🚀" },
      { agent: AGENT, messages: [{ role: "user", content: "imported" }, step("", "i1"), result("i1")] },
    ]);
    const [a, b, imported] = created.map((s) => s.id) as [string, string, string];
    for (const id of [a, b, imported]) await expectCounted(id);
    await env.queries.appendImported(
      "default",
      imported,
      3,
      [step("done ü"), { role: "user", content: "" }],
      BIG,
    );
    await expectCounted(imported);

    // The claim's own start of the first run (its user message inserted by the claim).
    const claims = await Promise.all(
      [a, b].map((id) => grouped.claimSession(id, "w1", { startFirst: { tail: "awaiting_model" } })),
    );
    for (const [k, id] of [a, b].entries()) {
      expect(claims[k]!.started).not.toBeNull();
      await expectCounted(id);
    }
    const fences = [a, b].map((sessionId, k) => ({ sessionId, epoch: claims[k]!.epoch }));
    const runs = claims.map((c) => c!.next!.id);

    // Appends grouped (two sessions in one turn) and alone.
    await Promise.all(
      fences.map((fence, k) =>
        grouped.append(
          fence,
          { lastSeq: 1, lastStepSeq: null },
          runs[k]!,
          [step("", "c1", "c2")],
          "tools_pending",
        ),
      ),
    );
    await alone.append(
      fences[0]!,
      { lastSeq: 2, lastStepSeq: 2 },
      runs[0]!,
      [result("c1"), result("c2")],
      "awaiting_model",
    );
    await grouped.append(
      fences[1]!,
      { lastSeq: 2, lastStepSeq: 2 },
      runs[1]!,
      [result("c1"), result("c2")],
      "awaiting_model",
    );
    for (const id of [a, b]) await expectCounted(id);

    // A run's last append with its end, grouped and alone.
    await Promise.all(
      fences.map((fence, k) =>
        grouped.appendAndEndRun(
          fence,
          { lastSeq: 4, lastStepSeq: 2 },
          runs[k]!,
          { message: step("end ü"), tail: "completed" },
          "completed",
        ),
      ),
    );
    for (const id of [a, b]) await expectCounted(id);

    // A second run started by startRun, its user message appended in the same statement.
    const { run } = await env.queries.createRun({
      sessionId: a,
      kind: "run",
      trigger: "api",
      input: "again — ü",
    });
    const started = await alone.startRun(
      fences[0]!,
      { lastSeq: 5, lastStepSeq: 5 },
      { id: run.id, workerId: "w1", resumeKind: null },
      [{ role: "user", content: "again — ü" }],
      "awaiting_model",
    );
    expect(started).toHaveLength(1);
    await alone.appendAndEndRun(
      fences[0]!,
      { lastSeq: 6, lastStepSeq: 5 },
      run.id,
      { message: step("bye"), tail: "completed" },
      "completed",
    );
    await expectCounted(a);
    expect((await counts(a)).lastSeq).toBe(7);
  });

  it("is not moved by an append the fence refuses", async () => {
    const writes = new FencedWrites(env.fleet.database, { groupWrites: false });
    const { id } = await env.queries.createSession({ agent: AGENT, input: "hi" });
    const claim = await writes.claimSession(id, "w1", { startFirst: { tail: "awaiting_model" } });
    await writes.claimSession(id, "w2");
    await expect(
      writes.append(
        { sessionId: id, epoch: claim!.epoch },
        { lastSeq: 1, lastStepSeq: null },
        null,
        [step("late")],
        "completed",
      ),
    ).rejects.toThrow();
    await expectCounted(id);
    expect((await counts(id)).stored).toBe(2);
  });
});
