/**
 * Fenced writes and session queries against a real Postgres (a fresh database for this
 * file, no workers): the epoch fence, the history cursor, the one-result-per-call index,
 * atomic run start, run bookkeeping, imports and concurrent migrations.
 */
import { randomUUID } from "node:crypto";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseAgentConfig } from "../src/shared/agent-config.js";
import { openDatabase } from "../src/shared/db/client.js";
import { MIGRATIONS_FOLDER, migrateDatabase } from "../src/shared/db/migrate.js";
import { FencedError } from "../src/shared/errors.js";
import type { Message } from "../src/shared/messages.js";
import { resumePoint, toResumePointJson } from "../src/shared/resume-point.js";
import { FencedWrites } from "../src/shared/store/fenced-writes.js";
import { INLINE_HISTORY_MAX, readClaimedHistory } from "../src/shared/store/history-reads.js";
import { json, messageFromRaw, type RawMessage } from "../src/shared/store/rows.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const AGENT = parseAgentConfig({ model: { provider: "scripted", steps: [{ text: "hi" }] } });
const ADMIN_URL = process.env.TEST_ADMIN_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";

let fleet: FleetEnv;
let queries: SessionQueries;
let writes: FencedWrites;

beforeAll(async () => {
  fleet = await createFleetEnv("fencedwrites");
  queries = new SessionQueries(fleet.database);
  writes = new FencedWrites(fleet.database);
});
afterAll(async () => fleet?.close());

async function newSession(messages?: Message[]): Promise<string> {
  return (await queries.createSession({ agent: AGENT, ...(messages ? { messages } : {}) })).id;
}

async function sessionRow(id: string) {
  const [row] = await fleet.database.sql<
    { last_seq: number; tail_state: string; lease_epoch: string; lease_owner: string | null }[]
  >`select last_seq, tail_state, lease_epoch, lease_owner from sessions where id = ${id}`;
  return row!;
}

async function messageCount(id: string): Promise<number> {
  const [row] = await fleet.database.sql<{ n: number }[]>`
    select count(*)::int as n from messages where session_id = ${id}`;
  return row!.n;
}

const user = (content: string): Message => ({ role: "user", content });
const askTools = (...ids: string[]): Message => ({
  role: "assistant",
  content: "",
  toolCalls: ids.map((id) => ({ id, name: "write_file", arguments: { path: `${id}.txt`, content: id } })),
  stopReason: "tool_use",
});
const result = (id: string): Message => ({
  role: "tool",
  toolCallId: id,
  name: "write_file",
  content: `wrote ${id}.txt`,
  success: true,
});

/** The epoch a new holder gets from claimSession. */
async function takeEpoch(id: string, workerId: string): Promise<number | null> {
  return (await writes.claimSession(id, workerId))?.epoch ?? null;
}

describe("claimSession", () => {
  it("bumps the epoch for each holder and records the owner", async () => {
    const id = await newSession();
    expect(await takeEpoch(id, "w1")).toBe(1);
    expect(await takeEpoch(id, "w2")).toBe(2);
    expect(await takeEpoch(id, "w3")).toBe(3);
    expect((await sessionRow(id)).lease_owner).toBe("w3");
  });

  it("returns null for an unknown session", async () => {
    expect(await takeEpoch(randomUUID(), "w1")).toBeNull();
  });
});

describe("append", () => {
  it("stores messages with contiguous seqs and the tail state", async () => {
    const id = await newSession();
    const epoch = (await takeEpoch(id, "w1"))!;
    const fence = { sessionId: id, epoch };
    const first = await writes.append(
      fence,
      { lastSeq: 0, lastStepSeq: null },
      null,
      [user("go")],
      "awaiting_model",
    );
    expect(first.map((m) => m.seq)).toEqual([1]);
    const usage = { inputTokens: 5, outputTokens: 2 };
    const more = await writes.append(
      fence,
      { lastSeq: 1, lastStepSeq: null },
      null,
      [{ ...askTools("a"), usage } as Message, result("a")],
      "awaiting_model",
    );
    expect(more.map((m) => m.seq)).toEqual([2, 3]);
    expect(more[0]!.createdAt).toMatch(/^\d{4}-\d\d-\d\dT/);
    expect(await sessionRow(id)).toMatchObject({ last_seq: 3, tail_state: "awaiting_model" });
    const history = await queries.loadHistory(id);
    expect(history.map((m) => m.seq)).toEqual([1, 2, 3]);
    expect(history.map(({ seq: _s, createdAt: _c, ...m }) => m)).toEqual([
      user("go"),
      { ...askTools("a"), usage },
      result("a"),
    ]);
    const [row] = await fleet.database.sql<{ call_seq: number }[]>`
      select call_seq from messages where session_id = ${id} and seq = 3`;
    expect(row!.call_seq).toBe(2);
  });

  it("appending nothing writes nothing", async () => {
    const id = await newSession();
    const epoch = (await takeEpoch(id, "w1"))!;
    expect(
      await writes.append({ sessionId: id, epoch }, { lastSeq: 0, lastStepSeq: null }, null, [], "empty"),
    ).toEqual([]);
  });

  it("refuses a stale epoch and stores nothing", async () => {
    const id = await newSession([user("go")]);
    const old = (await takeEpoch(id, "w1"))!;
    await takeEpoch(id, "w2");
    const before = await sessionRow(id);
    await expect(
      writes.append(
        { sessionId: id, epoch: old },
        { lastSeq: 1, lastStepSeq: null },
        null,
        [{ role: "assistant", content: "late", stopReason: "end_turn" }],
        "completed",
      ),
    ).rejects.toBeInstanceOf(FencedError);
    expect(await messageCount(id)).toBe(1);
    const after = await sessionRow(id);
    expect(after).toMatchObject({ last_seq: before.last_seq, tail_state: before.tail_state });
    expect(after.tail_state).toBe("awaiting_model");
  });

  it("refuses a cursor that does not match the stored history", async () => {
    const id = await newSession([user("go")]);
    const epoch = (await takeEpoch(id, "w1"))!;
    for (const lastSeq of [0, 2]) {
      await expect(
        writes.append(
          { sessionId: id, epoch },
          { lastSeq, lastStepSeq: null },
          null,
          [{ role: "assistant", content: "x", stopReason: "end_turn" }],
          "completed",
        ),
      ).rejects.toBeInstanceOf(FencedError);
    }
    expect(await messageCount(id)).toBe(1);
    expect(await sessionRow(id)).toMatchObject({ last_seq: 1, tail_state: "awaiting_model" });
  });

  it("lets exactly one of two concurrent appenders with the same fence and cursor win", async () => {
    const id = await newSession([user("go")]);
    const epoch = (await takeEpoch(id, "w1"))!;
    const attempt = (content: string) =>
      writes.append(
        { sessionId: id, epoch },
        { lastSeq: 1, lastStepSeq: null },
        null,
        [{ role: "assistant", content, stopReason: "end_turn" }],
        "completed",
      );
    const outcomes = await Promise.allSettled([attempt("first"), attempt("second")]);
    const won = outcomes.filter((o) => o.status === "fulfilled");
    const lost = outcomes.filter((o): o is PromiseRejectedResult => o.status === "rejected");
    expect(won).toHaveLength(1);
    expect(lost).toHaveLength(1);
    expect(lost[0]!.reason).toBeInstanceOf(FencedError);
    const history = await queries.loadHistory(id);
    expect(history.map((m) => m.seq)).toEqual([1, 2]);
    expect(await sessionRow(id)).toMatchObject({ last_seq: 2, tail_state: "completed" });
  });

  it("the unique index refuses a second result for the same call of the same step", async () => {
    const id = await newSession([user("go"), askTools("c1", "c2"), result("c1")]);
    const epoch = (await takeEpoch(id, "w1"))!;
    // A valid fence and cursor: only the index stands in the way.
    const error = await writes
      .append({ sessionId: id, epoch }, { lastSeq: 3, lastStepSeq: 2 }, null, [result("c1")], "tools_pending")
      .then(
        () => null,
        (e: unknown) => e,
      );
    expect(error).toMatchObject({ code: "23505", constraint_name: "messages_one_result_per_call" });
    expect(await messageCount(id)).toBe(3);
    expect(await sessionRow(id)).toMatchObject({ last_seq: 3, tail_state: "tools_pending" });
    // The other call can still be answered, and the same call id in a later step too.
    await writes.append(
      { sessionId: id, epoch },
      { lastSeq: 3, lastStepSeq: 2 },
      null,
      [result("c2")],
      "awaiting_model",
    );
    await writes.append(
      { sessionId: id, epoch },
      { lastSeq: 4, lastStepSeq: 2 },
      null,
      [askTools("c1"), result("c1")],
      "awaiting_model",
    );
    expect(await messageCount(id)).toBe(6);
  });
});

describe("runs", () => {
  it("startRun appends and marks the run running, atomically", async () => {
    const id = await newSession();
    const { run } = await queries.createRun({ sessionId: id, kind: "run", trigger: "api", input: "go" });
    expect(run.status).toBe("queued");
    const epoch = (await takeEpoch(id, "w1"))!;
    const stored = await writes.startRun(
      { sessionId: id, epoch },
      { lastSeq: 0, lastStepSeq: null },
      { id: run.id, workerId: "w1", resumeKind: null },
      [user("go")],
      "awaiting_model",
    );
    expect(stored!.map((m) => m.seq)).toEqual([1]);
    const [msg] = await fleet.database.sql<{ run_id: string }[]>`
      select run_id from messages where session_id = ${id}`;
    expect(msg!.run_id).toBe(run.id);
    expect(await queries.getRun(run.id)).toMatchObject({ status: "running", workerId: "w1" });
    expect((await queries.getRun(run.id))!.startedAt).toBeInstanceOf(Date);
  });

  it("startRun with a stale fence appends nothing and leaves the run queued", async () => {
    const id = await newSession();
    const { run } = await queries.createRun({ sessionId: id, kind: "run", trigger: "api", input: "go" });
    const old = (await takeEpoch(id, "w1"))!;
    await takeEpoch(id, "w2");
    await expect(
      writes.startRun(
        { sessionId: id, epoch: old },
        { lastSeq: 0, lastStepSeq: null },
        { id: run.id, workerId: "w1", resumeKind: null },
        [user("go")],
        "awaiting_model",
      ),
    ).rejects.toBeInstanceOf(FencedError);
    expect(await messageCount(id)).toBe(0);
    expect(await queries.getRun(run.id)).toMatchObject({ status: "queued", workerId: null, startedAt: null });
  });

  it("startRun with a moved history rolls back: the run stays queued", async () => {
    const id = await newSession([user("earlier")]);
    const { run } = await queries.createRun({ sessionId: id, kind: "resume", trigger: "api" });
    const epoch = (await takeEpoch(id, "w1"))!;
    await expect(
      writes.startRun(
        { sessionId: id, epoch },
        { lastSeq: 0, lastStepSeq: null },
        { id: run.id, workerId: "w1", resumeKind: "call_model" },
        [user("stale cursor")],
        "awaiting_model",
      ),
    ).rejects.toBeInstanceOf(FencedError);
    expect(await messageCount(id)).toBe(1);
    expect(await queries.getRun(run.id)).toMatchObject({ status: "queued", resumeKind: null });
  });

  it("startRun returns null for a run that was already started, and [] for nothing to append", async () => {
    const id = await newSession([user("go")]);
    const { run } = await queries.createRun({ sessionId: id, kind: "resume", trigger: "sweeper" });
    const epoch = (await takeEpoch(id, "w1"))!;
    const fence = { sessionId: id, epoch };
    const cursor = { lastSeq: 1, lastStepSeq: null };
    const start = { id: run.id, workerId: "w1", resumeKind: "call_model" };
    expect(await writes.startRun(fence, cursor, start, [], "awaiting_model")).toEqual([]);
    expect(await queries.getRun(run.id)).toMatchObject({ status: "running", resumeKind: "call_model" });
    expect(await writes.startRun(fence, cursor, start, [], "awaiting_model")).toBeNull();
    expect(await writes.startRun(fence, cursor, start, [user("dup")], "awaiting_model")).toBeNull();
    expect(await messageCount(id)).toBe(1);
  });

  it("endRun with a stale epoch throws and leaves the run unchanged", async () => {
    const id = await newSession();
    const { run } = await queries.createRun({ sessionId: id, kind: "run", trigger: "api", input: "go" });
    const old = (await takeEpoch(id, "w1"))!;
    await writes.startRun(
      { sessionId: id, epoch: old },
      { lastSeq: 0, lastStepSeq: null },
      { id: run.id, workerId: "w1", resumeKind: null },
      [user("go")],
      "awaiting_model",
    );
    // A fence bump without claimSession's cleanup, so the run is still `running`.
    await fleet.database.sql`update sessions set lease_epoch = lease_epoch + 1 where id = ${id}`;
    const current = old + 1;
    await expect(writes.endRun({ sessionId: id, epoch: old }, run.id, "completed")).rejects.toBeInstanceOf(
      FencedError,
    );
    expect(await queries.getRun(run.id)).toMatchObject({
      status: "running",
      endedReason: null,
      endedAt: null,
    });

    const usage = { inputTokens: 3, outputTokens: 4 };
    await writes.endRun({ sessionId: id, epoch: current }, run.id, "provider_error", { error: "503", usage });
    expect(await queries.getRun(run.id)).toMatchObject({
      status: "ended",
      endedReason: "provider_error",
      error: "503",
      usage,
    });
    // Ending an ended run again changes nothing and does not throw.
    await writes.endRun({ sessionId: id, epoch: current }, run.id, "completed");
    expect(await queries.getRun(run.id)).toMatchObject({ endedReason: "provider_error" });
  });

  it("claimSession ends only running runs and returns the oldest queued one; endRun returns the next", async () => {
    const id = await newSession();
    const queued = (await queries.createRun({ sessionId: id, kind: "run", trigger: "api", input: "1" })).run;
    const running = (await queries.createRun({ sessionId: id, kind: "run", trigger: "api", input: "2" })).run;
    const ended = (await queries.createRun({ sessionId: id, kind: "run", trigger: "api", input: "3" })).run;
    await fleet.database
      .sql`update runs set created_at = created_at - interval '1 minute' where id = ${queued.id}`;
    const first = (await writes.claimSession(id, "w1"))!;
    expect(first.staleRunIds).toEqual([]);
    expect(first.next?.id).toBe(queued.id);
    const fence = { sessionId: id, epoch: first.epoch };
    await writes.startRun(
      fence,
      { lastSeq: 0, lastStepSeq: null },
      { id: running.id, workerId: "w1", resumeKind: null },
      [],
      "empty",
    );
    expect((await writes.endRun(fence, ended.id, "completed")).next?.id).toBe(queued.id);

    const second = (await writes.claimSession(id, "w2"))!;
    expect(second.epoch).toBe(first.epoch + 1);
    expect(second.staleRunIds).toEqual([running.id]);
    expect(second.staleRuns).toEqual([{ id: running.id, kind: "run", outcome: "crashed" }]);
    expect(second.next).toMatchObject({ id: queued.id, status: "queued", input: "1", kind: "run" });
    expect(second.agent).toMatchObject({ model: { provider: "scripted" } });
    expect(await queries.getRun(running.id)).toMatchObject({ status: "ended", endedReason: "crashed" });
    expect(await queries.getRun(queued.id)).toMatchObject({ status: "queued", endedReason: null });
    expect(await queries.getRun(ended.id)).toMatchObject({ status: "ended", endedReason: "completed" });
    // The old holder can no longer end anything.
    await expect(writes.endRun(fence, queued.id, "completed")).rejects.toBeInstanceOf(FencedError);
    expect((await writes.claimSession(id, "w3"))!.staleRunIds).toEqual([]);
  });

  it("claimSession names the kind of each run it ends crashed (a resume counts as a resume)", async () => {
    const id = await newSession();
    const resume = (
      await queries.createRun({ sessionId: id, kind: "resume", trigger: "sweeper", resumeKind: "call_model" })
    ).run;
    const first = (await writes.claimSession(id, "w1"))!;
    await writes.startRun(
      { sessionId: id, epoch: first.epoch },
      { lastSeq: 0, lastStepSeq: null },
      { id: resume.id, workerId: "w1", resumeKind: "call_model" },
      [],
      "empty",
    );
    const second = (await writes.claimSession(id, "w2"))!;
    expect(second.staleRuns).toEqual([{ id: resume.id, kind: "resume", outcome: "crashed" }]);
    expect(second.staleRunIds).toEqual([resume.id]);
  });

  it("createRun joins the active resume, and queues a new one after it ended", async () => {
    const id = await newSession([user("go")]);
    const first = await queries.createRun({ sessionId: id, kind: "resume", trigger: "sweeper" });
    const second = await queries.createRun({ sessionId: id, kind: "resume", trigger: "api" });
    expect(first.created).toBe(true);
    expect(second).toMatchObject({ created: false, run: { id: first.run.id, trigger: "sweeper" } });
    expect(first.run.jobId).toBe(`run-${first.run.id}`);

    // Joined while running too.
    const epoch = (await takeEpoch(id, "w1"))!;
    const fence = { sessionId: id, epoch };
    await writes.startRun(
      fence,
      { lastSeq: 1, lastStepSeq: null },
      { id: first.run.id, workerId: "w1", resumeKind: "call_model" },
      [],
      "awaiting_model",
    );
    expect(await queries.createRun({ sessionId: id, kind: "resume", trigger: "worker" })).toMatchObject({
      created: false,
      run: { id: first.run.id },
    });

    // Runs with new input are never joined.
    const a = await queries.createRun({ sessionId: id, kind: "run", trigger: "api", input: "x" });
    const b = await queries.createRun({ sessionId: id, kind: "run", trigger: "api", input: "x" });
    expect(a.created && b.created).toBe(true);
    expect(a.run.id).not.toBe(b.run.id);

    await writes.endRun(fence, first.run.id, "completed");
    const third = await queries.createRun({ sessionId: id, kind: "resume", trigger: "sweeper" });
    expect(third.created).toBe(true);
    expect(third.run.id).not.toBe(first.run.id);
  });

  it("concurrent resume requests create exactly one run", async () => {
    const id = await newSession([user("go")]);
    const results = await Promise.all(
      Array.from({ length: 5 }, () =>
        queries.createRun({ sessionId: id, kind: "resume", trigger: "sweeper" }),
      ),
    );
    expect(results.filter((r) => r.created)).toHaveLength(1);
    expect(new Set(results.map((r) => r.run.id)).size).toBe(1);
  });
});

describe("createSession with an imported history", () => {
  it("stores call_seq for tool results and the tail state", async () => {
    const history: Message[] = [
      user("write a, b, c"),
      askTools("a", "b"),
      result("a"),
      result("b"),
      askTools("c"),
      result("c"),
    ];
    const id = await newSession(history);
    const rows = await fleet.database.sql<{ seq: number; role: string; call_seq: number | null }[]>`
      select seq, role, call_seq from messages where session_id = ${id} order by seq`;
    expect(rows.map((r) => [r.seq, r.role, r.call_seq])).toEqual([
      [1, "user", null],
      [2, "assistant", null],
      [3, "tool", 2],
      [4, "tool", 2],
      [5, "assistant", null],
      [6, "tool", 5],
    ]);
    expect(await sessionRow(id)).toMatchObject({
      last_seq: 6,
      tail_state: "awaiting_model",
      lease_epoch: "0",
    });
  });

  it.each([
    [[], "empty", 0],
    [[user("go"), askTools("a", "b"), result("a")], "tools_pending", 3],
    [[user("go"), { role: "assistant", content: "cut", stopReason: "interrupted" }], "interrupted", 2],
    [[user("go"), { role: "assistant", content: "done", stopReason: "end_turn" }], "completed", 2],
    [[user("go"), result("zzz")], "malformed", 2],
  ] as [Message[], string, number][])("imports %j with tail state %s", async (history, tail, lastSeq) => {
    const id = await newSession(history);
    expect(await sessionRow(id)).toMatchObject({ tail_state: tail, last_seq: lastSeq });
    expect(await messageCount(id)).toBe(history.length);
  });

  it("an imported history continues with fenced appends", async () => {
    const id = await newSession([user("go"), askTools("a", "b"), result("a")]);
    const epoch = (await takeEpoch(id, "w1"))!;
    const history = await queries.loadHistory(id);
    await writes.append(
      { sessionId: id, epoch },
      { lastSeq: history.at(-1)!.seq, lastStepSeq: 2 },
      null,
      [result("b")],
      "awaiting_model",
    );
    const [row] = await fleet.database.sql<{ call_seq: number }[]>`
      select call_seq from messages where session_id = ${id} and seq = 4`;
    expect(row!.call_seq).toBe(2);
    // The next holder reads the whole history with its claim, exactly as stored.
    const claim = (await writes.claimSession(id, "w2"))!;
    expect(claim.history).toEqual(await queries.loadHistory(id));
    expect(claim.history.map((m) => [m.seq, m.role])).toEqual([
      [1, "user"],
      [2, "assistant"],
      [3, "tool"],
      [4, "tool"],
    ]);
  });
});

describe("a long history's claim (longer than INLINE_HISTORY_MAX: read after the claim, as rows)", () => {
  /** Every kind of message and field a stored message can have. */
  function longHistory(): Message[] {
    const history: Message[] = [];
    for (let i = 0; history.length < INLINE_HISTORY_MAX + 40; i++) {
      history.push(
        user(`question ${i} ✓`),
        { role: "internal", content: `note ${i}` },
        askTools(`a${i}`, `b${i}`),
        result(`a${i}`),
        result(`b${i}`),
        {
          role: "assistant",
          content: `answer ${i}`,
          stopReason: "end_turn",
          usage: { inputTokens: i, outputTokens: 2, cacheReadTokens: 1 },
          providerState: { provider: "openai", api: "responses", target: "x", items: [{ id: `r${i}` }] },
        },
        { role: "assistant", content: `cut ${i}`, stopReason: "interrupted" },
        { role: "tool", toolCallId: "nobody", name: "t", content: "stray", success: false },
      );
    }
    return history;
  }

  /** The history as the claim's statement read it before (row_to_json of each row). */
  async function asStatementReadIt(id: string) {
    const rows = await fleet.database.sql<{ m: RawMessage }[]>`
      select row_to_json(m) as m from messages m where m.session_id = ${id} order by m.seq`;
    return rows.map((row) => messageFromRaw(json<RawMessage>(row.m)));
  }

  it("gives the stored history exactly, claimed alone and claimed in one statement with a short one", async () => {
    const long = await newSession(longHistory());
    const expected = await asStatementReadIt(long);
    expect(expected.length).toBeGreaterThan(INLINE_HISTORY_MAX);
    const alone = (await writes.claimSession(long, "w1"))!;
    expect(alone.history).toEqual(expected);
    expect(await queries.loadHistory(long)).toEqual(expected);
    const short = await newSession([user("hi")]);
    const [a, b] = await Promise.all([writes.claimSession(long, "w2"), writes.claimSession(short, "w2")]);
    expect(a!.history).toEqual(expected);
    expect(a!.epoch).toBe(2);
    expect(b!.history).toEqual(await asStatementReadIt(short));
  });

  it("is read only under the claim's epoch: a later claim fences the earlier one out", async () => {
    const id = await newSession(longHistory());
    const first = (await writes.claimSession(id, "w1"))!;
    await writes.claimSession(id, "w2");
    await expect(readClaimedHistory(fleet.database, id, first.epoch)).rejects.toBeInstanceOf(FencedError);
    expect((await readClaimedHistory(fleet.database, id, first.epoch + 1)).history).toEqual(first.history);
  });
});

describe("SessionQueries.resumePoint (the history's shape, without its texts)", () => {
  it.each([
    [[]],
    [[user("go"), askTools("a", "b"), result("a")]],
    [[user("go"), { role: "assistant", content: "cut", stopReason: "interrupted" }]],
    [[user("go"), { role: "assistant", content: "long", stopReason: "max_output" }]],
    [[user("go"), { role: "assistant", content: "done", stopReason: "end_turn" }]],
    [[user("go"), { role: "assistant", content: "?", stopReason: "weird_stop" }]],
    [[user("go"), askTools("a"), result("a")]],
    [[user("go"), result("zzz")]],
    [[user("go"), askTools("a", "b"), result("b"), user("again")]],
    [[user("go"), { role: "internal", content: "note" }]],
  ] as [Message[]][])("answers as resumePoint of the stored history: %j", async (history) => {
    const id = await newSession(history);
    const stored = await queries.loadHistory(id);
    expect(await queries.resumePoint(id)).toEqual(toResumePointJson(resumePoint(stored)));
  });

  it("is running while a run is queued, and only for the session's tenant", async () => {
    const id = await newSession([user("go"), askTools("a")]);
    await queries.createRun({ sessionId: id, kind: "run", trigger: "api", input: "next" });
    expect(await queries.resumePoint(id)).toEqual({ resumable: false, reason: "running" });
    expect(await queries.resumePoint(id, "other-tenant")).toMatchObject({ kind: "recover_tools" });
  });
});

describe("migrateDatabase", () => {
  it("succeeds when three processes migrate a fresh database at once", async () => {
    const name = `fleet_t_migrate_${randomUUID().slice(0, 8)}`;
    const admin = postgres(ADMIN_URL, { max: 1, onnotice: () => {} });
    await admin.unsafe(`create database "${name}"`);
    const url = new URL(ADMIN_URL);
    url.pathname = `/${name}`;
    // Pools of one connection too: the lock has a connection of its own.
    const databases = [1, 2, 1].map((max) => openDatabase(url.toString(), { max }));
    try {
      await Promise.all(databases.map((d) => migrateDatabase(d)));
      const tables = await databases[0]!.sql<{ table_name: string }[]>`
        select table_name from information_schema.tables where table_schema = 'public' order by table_name`;
      expect(tables.map((t) => t.table_name)).toEqual(
        expect.arrayContaining(["messages", "runs", "sessions"]),
      );
      // Every committed migration applied exactly once.
      const journal = JSON.parse(await readFile(join(MIGRATIONS_FOLDER, "meta/_journal.json"), "utf8")) as {
        entries: unknown[];
      };
      const [applied] = await databases[0]!.sql<{ n: number }[]>`
        select count(*)::int as n from drizzle.__drizzle_migrations`;
      expect(applied!.n).toBe(journal.entries.length);
      // And once more, sequentially: nothing left to do.
      await migrateDatabase(databases[1]!);
    } finally {
      await Promise.all(databases.map((d) => d.close()));
      await admin.unsafe(`drop database if exists "${name}" with (force)`);
      await admin.end();
    }
  });
});
