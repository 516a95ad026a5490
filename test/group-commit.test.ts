/**
 * Group commit (group-commit.ts) against a real Postgres: many sessions' claims, mid-run
 * appends and run ends of one event-loop turn in one statement each, every session still
 * fenced on its own, a refused or busy one retried alone, and the answer the cancel check
 * reads.
 */
import { randomUUID } from "node:crypto";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { parseAgentConfig } from "../src/shared/agent-config.js";
import { FencedError } from "../src/shared/errors.js";
import type { Message } from "../src/shared/messages.js";
import { cancelSessions } from "../src/shared/store/batch-cancel.js";
import { type Fence, FencedWrites } from "../src/shared/store/fenced-writes.js";
import { GroupCommit } from "../src/shared/store/group-commit.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const AGENT = parseAgentConfig({ model: { provider: "scripted", steps: [{ text: "hi" }] } });

let fleet: FleetEnv;
let queries: SessionQueries;
let writes: FencedWrites;
/** Statements FencedWrites sent (its database's `sql`, counted). */
let statements = 0;

beforeAll(async () => {
  fleet = await createFleetEnv("groupedappends");
  queries = new SessionQueries(fleet.database);
  // A statement is a query that is run (awaited); a fragment embedded in another never is.
  const sql = new Proxy(fleet.database.sql, {
    apply(target, self, args) {
      const query = Reflect.apply(target, self, args) as PromiseLike<unknown>;
      const then = query.then.bind(query);
      let counted = false;
      Object.assign(query, {
        // biome-ignore lint/suspicious/noThenProperty: counts the runs of a real query, then runs it.
        then: (...handlers: Parameters<typeof then>) => {
          if (!counted) statements++;
          counted = true;
          return then(...handlers);
        },
      });
      return query;
    },
  });
  writes = new FencedWrites({ ...fleet.database, sql });
});
afterAll(async () => fleet?.close());

const user = (content: string): Message => ({ role: "user", content });
const answer = (content: string): Message => ({
  role: "assistant",
  content,
  stopReason: "end_turn",
  usage: { inputTokens: 10, outputTokens: 5 },
});

/** A new session claimed by a worker: its fence. */
async function claimed(): Promise<Fence> {
  const { id } = await queries.createSession({ agent: AGENT });
  const claim = await writes.claimSession(id, `w-${randomUUID().slice(0, 4)}`);
  return { sessionId: id, epoch: claim!.epoch };
}

async function stored(sessionId: string) {
  const rows = await fleet.database.sql<{ seq: number; content: string }[]>`
    select seq, content from messages where session_id = ${sessionId} order by seq`;
  const [session] = await fleet.database.sql<{ last_seq: number; tokens_used: string; tail_state: string }[]>`
    select last_seq, tokens_used, tail_state from sessions where id = ${sessionId}`;
  return { messages: rows.map((r) => `${r.seq}:${r.content}`), session: session! };
}

const cursor0 = { lastSeq: 0, lastStepSeq: null };

describe("grouped appends", () => {
  it("writes many sessions' appends of one turn in one statement, each numbered and counted as if alone", async () => {
    const fences = await Promise.all(Array.from({ length: 5 }, () => claimed()));
    const before = statements;
    const results = await Promise.all(
      fences.map((fence, i) =>
        writes.appendStep(fence, cursor0, null, [user(`q${i}`), answer(`a${i}`)], "completed"),
      ),
    );
    expect(statements - before).toBe(1);
    for (const [i, fence] of fences.entries()) {
      expect(results[i]!.stored.map((m) => m.seq)).toEqual([1, 2]);
      expect(results[i]!.cancelled).toBe(false);
      const { messages, session } = await stored(fence.sessionId);
      expect(messages).toEqual([`1:q${i}`, `2:a${i}`]);
      expect(session).toEqual({ last_seq: 2, tokens_used: "15", tail_state: "completed" });
    }
  });

  it("fences each append on its own: a moved epoch or last_seq fails only that one", async () => {
    const [a, b, c] = await Promise.all([claimed(), claimed(), claimed()]);
    const results = await Promise.allSettled([
      writes.appendStep(a!, cursor0, null, [user("a")], "awaiting_model"),
      writes.appendStep({ ...b!, epoch: b!.epoch - 1 }, cursor0, null, [user("b")], "awaiting_model"),
      writes.appendStep(c!, { lastSeq: 3, lastStepSeq: null }, null, [user("c")], "awaiting_model"),
    ]);
    expect(results[0]!.status).toBe("fulfilled");
    expect((results[1] as PromiseRejectedResult).reason).toBeInstanceOf(FencedError);
    expect((results[2] as PromiseRejectedResult).reason).toBeInstanceOf(FencedError);
    expect((await stored(a!.sessionId)).messages).toEqual(["1:a"]);
    expect((await stored(b!.sessionId)).messages).toEqual([]);
    expect((await stored(c!.sessionId)).session.last_seq).toBe(0);
  });

  it("an append Postgres refuses fails alone; the others of its statement are stored", async () => {
    const [a, bad, c] = await Promise.all([claimed(), claimed(), claimed()]);
    const results = await Promise.allSettled([
      writes.appendStep(a!, cursor0, null, [user("a")], "awaiting_model"),
      writes.appendStep(bad!, cursor0, null, [user("nul \u0000 byte")], "awaiting_model"),
      writes.appendStep(c!, cursor0, null, [user("c")], "awaiting_model"),
    ]);
    expect(results.map((r) => r.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
    // The refusal is the single statement's own (SQLSTATE class 22), which parks the session.
    expect(String((results[1] as PromiseRejectedResult).reason.code)).toMatch(/^22/);
    expect((await stored(a!.sessionId)).messages).toEqual(["1:a"]);
    expect((await stored(bad!.sessionId)).messages).toEqual([]);
    expect((await stored(c!.sessionId)).messages).toEqual(["1:c"]);
  });

  it("never waits for a busy session row: the others commit at once, the busy one when its row is free", async () => {
    const [a, busy, c] = await Promise.all([claimed(), claimed(), claimed()]);
    const other = postgres(fleet.database.url, { max: 1, onnotice: () => {} });
    let release!: () => void;
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    let locked!: () => void;
    const isLocked = new Promise<void>((resolve) => {
      locked = resolve;
    });
    const holder = other.begin(async (tx) => {
      await tx`select 1 from sessions where id = ${busy!.sessionId} for update`;
      locked();
      await held;
    });
    try {
      await isLocked;
      const pending = [
        writes.appendStep(a!, cursor0, null, [user("a")], "awaiting_model"),
        writes.appendStep(busy!, cursor0, null, [user("busy")], "awaiting_model"),
        writes.appendStep(c!, cursor0, null, [user("c")], "awaiting_model"),
      ];
      const busyDone = vi.fn();
      void pending[1]!.then(busyDone);
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect((await stored(a!.sessionId)).messages).toEqual(["1:a"]);
      expect((await stored(c!.sessionId)).messages).toEqual(["1:c"]);
      expect(busyDone).not.toHaveBeenCalled();
      release();
      await holder;
      await Promise.all(pending);
      expect((await stored(busy!.sessionId)).messages).toEqual(["1:busy"]);
    } finally {
      release();
      await other.end();
    }
  });

  it("answers, per session, whether it was cancelled (the check before the next tool)", async () => {
    const [a, cancelled] = await Promise.all([claimed(), claimed()]);
    await fleet.database.sql`update sessions set status = 'cancelled' where id = ${cancelled!.sessionId}`;
    const [ra, rc] = await Promise.all([
      writes.appendStep(a!, cursor0, null, [user("a")], "awaiting_model"),
      writes.appendStep(cancelled!, cursor0, null, [user("c")], "awaiting_model"),
    ]);
    expect(ra!.cancelled).toBe(false);
    expect(rc!.cancelled).toBe(true);
  });

  it("two appends for one session in one turn: the second goes alone, after the first, and is fenced by it", async () => {
    const [fence, other] = await Promise.all([claimed(), claimed()]);
    const results = await Promise.allSettled([
      writes.appendStep(fence, cursor0, null, [user("first")], "awaiting_model"),
      writes.appendStep(fence, cursor0, null, [user("second")], "awaiting_model"),
      writes.appendStep(other!, cursor0, null, [user("other")], "awaiting_model"),
    ]);
    expect(results.map((r) => r.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
    expect((results[1] as PromiseRejectedResult).reason).toBeInstanceOf(FencedError);
    expect((await stored(fence!.sessionId)).messages).toEqual(["1:first"]);
  });
});

describe("grouped run ends (the last append and the run's end)", () => {
  /** A new session whose first run the claim started (its user message is seq 1). */
  async function running(): Promise<{ fence: Fence; runId: string }> {
    const { id } = await queries.createSession({ agent: AGENT });
    const { run } = await queries.createRun({ sessionId: id, kind: "run", trigger: "api", input: "go" });
    const claim = await writes.claimSession(id, "w1", { startFirst: { tail: "awaiting_model" } });
    expect(claim!.started).not.toBeNull();
    return { fence: { sessionId: id, epoch: claim!.epoch }, runId: run.id };
  }

  async function runRow(id: string) {
    const [row] = await fleet.database.sql<{ status: string; ended_reason: string | null; usage: unknown }[]>`
      select status, ended_reason, usage from runs where id = ${id}`;
    return row!;
  }

  async function sessionState(id: string) {
    const [row] = await fleet.database.sql<
      { status: string; parked_reason: string | null; last_seq: number }[]
    >`
      select status, parked_reason, last_seq from sessions where id = ${id}`;
    return row!;
  }

  it("ends many runs in one statement: each stored, ended, parked or given its next run as if alone", async () => {
    const [done, withNext, limited, fenced] = await Promise.all([running(), running(), running(), running()]);
    const { run: queued } = await queries.createRun({
      sessionId: withNext.fence.sessionId,
      kind: "run",
      trigger: "api",
      input: "again",
    });
    const cursor = { lastSeq: 1, lastStepSeq: null };
    const usage = { inputTokens: 10, outputTokens: 5 };
    const before = statements;
    const results = await Promise.allSettled([
      writes.appendAndEndRun(
        done.fence,
        cursor,
        done.runId,
        { message: answer("one"), tail: "completed" },
        "completed",
        {
          usage,
        },
      ),
      writes.appendAndEndRun(
        withNext.fence,
        cursor,
        withNext.runId,
        { message: answer("two"), tail: "completed" },
        "completed",
      ),
      writes.appendAndEndRun(
        limited.fence,
        cursor,
        limited.runId,
        { message: answer("three"), tail: "completed" },
        "max_turns",
        { error: "maxTurns 1 reached", park: { reason: "max_turns", detail: "maxTurns 1 reached" } },
      ),
      writes.appendAndEndRun(
        { ...fenced.fence, epoch: fenced.fence.epoch + 1 },
        cursor,
        fenced.runId,
        { message: answer("four"), tail: "completed" },
        "completed",
      ),
    ]);
    expect(statements - before).toBe(1);
    expect(results.map((r) => r.status)).toEqual(["fulfilled", "fulfilled", "fulfilled", "rejected"]);
    expect((results[3] as PromiseRejectedResult).reason).toBeInstanceOf(FencedError);
    const [r0, r1, r2] = results.map(
      (r) => (r as PromiseFulfilledResult<{ stored: { seq: number }[]; next: { id: string } | null }>).value,
    );
    expect(r0!.stored.map((m) => m.seq)).toEqual([2]);
    expect(r0!.next).toBeNull();
    expect(r1!.next?.id).toBe(queued.id);
    expect(r2!.next).toBeNull();
    expect(await runRow(done.runId)).toEqual({ status: "ended", ended_reason: "completed", usage });
    expect(await runRow(withNext.runId)).toMatchObject({
      status: "ended",
      ended_reason: "completed",
      usage: null,
    });
    expect(await runRow(limited.runId)).toMatchObject({ status: "ended", ended_reason: "max_turns" });
    expect(await runRow(fenced.runId)).toMatchObject({ status: "running" });
    expect(await sessionState(limited.fence.sessionId)).toEqual({
      status: "parked",
      parked_reason: "max_turns: maxTurns 1 reached",
      last_seq: 2,
    });
    expect(await sessionState(withNext.fence.sessionId)).toMatchObject({ status: "active", last_seq: 2 });
    expect(await sessionState(fenced.fence.sessionId)).toMatchObject({ status: "active", last_seq: 1 });
    expect((await stored(done.fence.sessionId)).messages).toEqual(["1:go", "2:one"]);
  });

  /**
   * The cancel (contracts §9) of each of `runs`' sessions, which finds its run running, then a
   * new message that re-opens `reopen`'s session: that message's queued run.
   */
  async function cancelThenReopen(runs: { fence: Fence }[], reopen: { fence: Fence }) {
    for (const { fence } of runs) {
      const cancel = await cancelSessions(fleet.database, "default", { sessionId: fence.sessionId });
      expect(cancel.sessionIds).toEqual([fence.sessionId]);
    }
    const { run } = await queries.createRun(
      { sessionId: reopen.fence.sessionId, kind: "run", trigger: "api", input: "again" },
      { unpark: true },
    );
    return run;
  }

  it("a run a cancel found running ends `cancelled`, its last message kept, grouped or alone", async () => {
    // The cancel (contracts §9) commits while the run's last model call is out; its signal is
    // lost, so the run comes to its end as if nothing happened. `reopened` got a new message
    // after the cancel (the session active again, that message's run queued).
    const [plain, reopened, alone] = await Promise.all([running(), running(), running()]);
    const again = await cancelThenReopen([plain, reopened, alone], reopened);
    const cursor = { lastSeq: 1, lastStepSeq: null };
    const end = ({ fence, runId }: { fence: Fence; runId: string }) =>
      writes.appendAndEndRun(
        fence,
        cursor,
        runId,
        { message: answer("late"), tail: "completed" },
        "completed",
      );
    const before = statements;
    const [onPlain, onReopened] = await Promise.all([end(plain), end(reopened)]);
    expect(statements - before).toBe(1);
    const onAlone = await end(alone);
    expect(statements - before).toBe(2);
    for (const { runId } of [plain, reopened, alone])
      expect(await runRow(runId)).toMatchObject({ status: "ended", ended_reason: "cancelled" });
    for (const { fence } of [plain, reopened, alone])
      expect((await stored(fence.sessionId)).messages).toEqual(["1:go", "2:late"]);
    // The worker learns it from the answer: RUN_COMPLETED, its metric and hooks say `cancelled` too.
    expect([onPlain.cancelled, onReopened.cancelled, onAlone.cancelled]).toEqual([true, true, true]);
    expect([onPlain.next, onReopened.next?.id, onAlone.next]).toEqual([null, again.id, null]);
    expect(await sessionState(plain.fence.sessionId)).toMatchObject({
      status: "cancelled",
      parked_reason: null,
    });
    expect(await sessionState(reopened.fence.sessionId)).toMatchObject({ status: "active" });
  });

  it("a run a cancel found running ends `cancelled` with no last message too (endRun), parking nothing", async () => {
    // The same cancel, its signal lost, while a run's last model call is out; the run then
    // comes to an end that appends nothing (a limit here; a provider error, a failure, …).
    const [plain, reopened, other] = await Promise.all([running(), running(), running()]);
    const again = await cancelThenReopen([plain, reopened], reopened);
    const park = { reason: "budget_exhausted", detail: "over budget" };
    const end = ({ fence, runId }: { fence: Fence; runId: string }) =>
      writes.endRun(fence, runId, "budget_exhausted", { error: "over budget", park });
    const before = statements;
    const [onPlain, onReopened, onOther] = [await end(plain), await end(reopened), await end(other)];
    // Read in the statement that ends the run: no round trip more.
    expect(statements - before).toBe(3);
    for (const { runId } of [plain, reopened])
      expect(await runRow(runId)).toMatchObject({ status: "ended", ended_reason: "cancelled" });
    expect(await runRow(other.runId)).toMatchObject({ status: "ended", ended_reason: "budget_exhausted" });
    // The worker learns it from the answer: RUN_COMPLETED, its metric and hooks say `cancelled` too.
    expect([onPlain, onReopened, onOther]).toEqual([
      { next: null, cancelled: true },
      { next: expect.objectContaining({ id: again.id }), cancelled: true },
      { next: null, cancelled: false },
    ]);
    expect(await sessionState(plain.fence.sessionId)).toMatchObject({
      status: "cancelled",
      parked_reason: null,
    });
    expect(await sessionState(reopened.fence.sessionId)).toMatchObject({
      status: "active",
      parked_reason: null,
    });
    expect(await sessionState(other.fence.sessionId)).toMatchObject({
      status: "parked",
      parked_reason: "budget_exhausted: over budget",
    });
    // Sent again (its first answer lost: db-rideout.ts), an end changes nothing and answers the
    // same, read from the ended run: a cancel that came after the run ended does not make it
    // `cancelled`.
    const done = await running();
    const complete = () => writes.endRun(done.fence, done.runId, "completed");
    expect(await complete()).toEqual({ next: null, cancelled: false });
    await cancelSessions(fleet.database, "default", { sessionId: done.fence.sessionId });
    expect(await sessionState(done.fence.sessionId)).toMatchObject({ status: "cancelled" });
    expect([await end(plain), await end(other), await complete()]).toEqual([
      onPlain,
      onOther,
      { next: null, cancelled: false },
    ]);
    expect(await runRow(done.runId)).toMatchObject({ ended_reason: "completed" });
  });

  it("a limit does not park a session that has another run queued", async () => {
    const [a, b] = await Promise.all([running(), running()]);
    await queries.createRun({ sessionId: a.fence.sessionId, kind: "run", trigger: "api", input: "more" });
    const cursor = { lastSeq: 1, lastStepSeq: null };
    const park = { reason: "budget_exhausted" };
    const [ra] = await Promise.all([
      writes.appendAndEndRun(
        a.fence,
        cursor,
        a.runId,
        { message: answer("a"), tail: "completed" },
        "budget_exhausted",
        {
          park,
        },
      ),
      writes.appendAndEndRun(
        b.fence,
        cursor,
        b.runId,
        { message: answer("b"), tail: "completed" },
        "budget_exhausted",
        {
          park,
        },
      ),
    ]);
    expect(ra.next).not.toBeNull();
    expect(await sessionState(a.fence.sessionId)).toMatchObject({ status: "active", parked_reason: null });
    expect(await sessionState(b.fence.sessionId)).toMatchObject({
      status: "parked",
      parked_reason: "budget_exhausted",
    });
  });
});

describe("grouped claims (a worker's start ramp)", () => {
  it("claims many sessions in one statement, starting each new session's first run as if alone", async () => {
    const sessions = await Promise.all(
      Array.from({ length: 4 }, async () => {
        const { id } = await queries.createSession({ agent: AGENT });
        const { run } = await queries.createRun({
          sessionId: id,
          kind: "run",
          trigger: "api",
          input: `go ${id}`,
        });
        return { id, runId: run.id };
      }),
    );
    // One taken before by a worker that then died mid-run: its run is left running.
    const crashed = sessions[3]!;
    const earlier = await writes.claimSession(crashed.id, "w-dead", {
      startFirst: { tail: "awaiting_model" },
    });
    expect(earlier!.started).not.toBeNull();
    const unknown = randomUUID();
    const before = statements;
    const claims = await Promise.all([
      ...sessions.map((s) => writes.claimSession(s.id, "w2", { startFirst: { tail: "awaiting_model" } })),
      writes.claimSession(unknown, "w2", { startFirst: { tail: "awaiting_model" } }),
    ]);
    // One grouped statement, and the unknown session alone (its row was not there to lock).
    expect(statements - before).toBe(2);
    for (const [i, s] of sessions.slice(0, 3).entries()) {
      const claim = claims[i]!;
      expect(claim.epoch).toBe(1);
      expect(claim.staleRunIds).toEqual([]);
      expect(claim.history).toEqual([]);
      expect(claim.next?.id).toBe(s.runId);
      expect(claim.started?.map((m) => [m.seq, m.content])).toEqual([[1, `go ${s.id}`]]);
      expect((await stored(s.id)).session).toMatchObject({ last_seq: 1, tail_state: "awaiting_model" });
      const [run] = await fleet.database.sql<{ status: string; worker_id: string }[]>`
        select status, worker_id from runs where id = ${s.runId}`;
      expect(run).toEqual({ status: "running", worker_id: "w2" });
    }
    // The crashed holder's session: a new epoch, its run ended crashed, the history read.
    const taken = claims[3]!;
    expect(taken.epoch).toBe(2);
    expect(taken.staleRunIds).toEqual([crashed.runId]);
    expect(taken.staleRuns).toEqual([{ id: crashed.runId, kind: "run", outcome: "crashed" }]);
    expect(taken.history.map((m) => m.seq)).toEqual([1]);
    expect(taken.started).toBeNull();
    expect(taken.next).toBeNull();
    expect(claims[4]).toBeNull();
  });
});

describe("GroupCommit with fakes", () => {
  const writes = [{ sessionId: "a" }, { sessionId: "b" }, { sessionId: "a" }];

  it("retries each write alone only when Postgres refused the statement for its content", async () => {
    for (const code of ["22P05", "23505", "54000", "40P01"]) {
      const alone = vi.fn(async (w: { sessionId: string }) => w.sessionId);
      const group = new GroupCommit(async () => {
        throw Object.assign(new Error("refused"), { code });
      }, alone);
      expect(await group.send(writes)).toEqual([{ outcome: "a" }, { outcome: "b" }, { outcome: "a" }]);
      expect(alone).toHaveBeenCalledTimes(3);
    }
  });

  it("fails every write, without retrying any, when the statement failed otherwise (it may have committed)", async () => {
    for (const code of ["CONNECTION_CLOSED", "57P01", undefined]) {
      const alone = vi.fn(async (w: { sessionId: string }) => w.sessionId);
      const lost = Object.assign(new Error("lost"), { code });
      const group = new GroupCommit(async () => {
        throw lost;
      }, alone);
      expect(await group.send(writes)).toEqual([{ error: lost }, { error: lost }, { error: lost }]);
      expect(alone).not.toHaveBeenCalled();
    }
  });

  it("sends a second write for one session alone, after the grouped statement, in order", async () => {
    const order: string[] = [];
    const group = new GroupCommit(
      async (batch: { sessionId: string; n: number }[]) => {
        order.push(`together ${batch.map((w) => w.n).join(",")}`);
        return batch.map((w) => ({ locked: true as const, out: w.n }));
      },
      async (w) => {
        order.push(`alone ${w.n}`);
        return w.n;
      },
    );
    const answers = await group.send([
      { sessionId: "a", n: 1 },
      { sessionId: "b", n: 2 },
      { sessionId: "a", n: 3 },
      { sessionId: "a", n: 4 },
    ]);
    expect(answers).toEqual([{ outcome: 1 }, { outcome: 2 }, { outcome: 3 }, { outcome: 4 }]);
    expect(order).toEqual(["together 1,2", "alone 3", "alone 4"]);
  });
});
