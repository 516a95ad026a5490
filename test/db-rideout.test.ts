/**
 * A run's writes riding out a Postgres outage (src/worker/db-rideout.ts), against a real
 * Postgres behind the TCP proxy (test/support/pg-proxy.ts), in process: an append whose
 * statement committed but whose answer was lost (the connection reset after the commit) is
 * found committed, not stored twice and not taken for a fence; a retried append of a holder
 * whose session was claimed meanwhile is refused and stores nothing; past the window, or once
 * the job is stopped, the write fails with Postgres' error as before. And the pure parts: the
 * backoff and the reading of what an append left.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseAgentConfig } from "../src/shared/agent-config.js";
import { type Database, openDatabase } from "../src/shared/db/client.js";
import { FencedError } from "../src/shared/errors.js";
import type { Message } from "../src/shared/messages.js";
import type { DbRideoutResult } from "../src/shared/metrics.js";
import { judgeAppend, md5Of } from "../src/shared/store/committed-appends.js";
import { type Fence, FencedWrites, type HistoryCursor } from "../src/shared/store/fenced-writes.js";
import { toNewRows } from "../src/shared/store/rows.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { isServiceUnavailable } from "../src/shared/unavailable.js";
import { nextRideoutStep, RIDEOUT_MAX_DELAY_MS, type RideoutDeps } from "../src/worker/db-rideout.js";
import { abortableSleep } from "../src/worker/models/scripted.js";
import { ridingOutWrites } from "../src/worker/rideout-writes.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { type PgProxy, startPgProxy } from "./support/pg-proxy.js";

const AGENT = parseAgentConfig({ model: { provider: "scripted", steps: [{ text: "hi" }] } });
const quiet = { warn: () => {}, info: () => {} };

describe("the ride-out's decisions (pure)", () => {
  it("backs off from 100 ms to at most 2 s, and tries last at the window's end", () => {
    const half = () => 0.5;
    const delays = [0, 1, 2, 3, 4, 5, 8].map((retries) =>
      nextRideoutStep({ elapsedMs: 0, windowMs: 30_000, retries, aborted: false }, half),
    );
    expect(delays.map((d) => (d.retry ? d.delayMs : null))).toEqual([88, 175, 350, 700, 1400, 1750, 1750]);
    for (const random of [() => 0, () => 0.999])
      for (let retries = 0; retries < 20; retries++) {
        const step = nextRideoutStep({ elapsedMs: 0, windowMs: 60_000, retries, aborted: false }, random);
        expect(step.retry && step.delayMs <= RIDEOUT_MAX_DELAY_MS && step.delayMs >= 75).toBe(true);
      }
    expect(
      nextRideoutStep({ elapsedMs: 29_900, windowMs: 30_000, retries: 9, aborted: false }, half),
    ).toEqual({
      retry: true,
      delayMs: 100,
    });
    expect(nextRideoutStep({ elapsedMs: 30_000, windowMs: 30_000, retries: 9, aborted: false })).toEqual({
      retry: false,
    });
    expect(nextRideoutStep({ elapsedMs: 0, windowMs: 30_000, retries: 0, aborted: true })).toEqual({
      retry: false,
    });
  });

  it("reads an append's own commit, nothing stored, or a history that moved", () => {
    const messages: Message[] = [
      { role: "tool", toolCallId: "c1", name: "t", content: "result", success: true },
    ];
    const rows = toNewRows(messages, 4, 3);
    const expected = { epoch: 7, lastSeq: 4, runId: "r1", rows };
    const at = new Date("2025-01-01T00:00:00.000Z");
    const mine = {
      seq: 5,
      role: "tool",
      tool_call_id: "c1",
      run_id: "r1",
      md5: md5Of("result"),
      created_at: at,
    };
    const read = (over: object, rowsRead = [mine]) => ({
      epoch: 7,
      lastSeq: 5,
      status: "active",
      sessionEvents: true,
      rows: rowsRead,
      ...over,
    });
    expect(judgeAppend(read({}), expected)).toEqual({
      found: "committed",
      inserted: [{ seq: 5, created_at: at }],
      status: "active",
      sessionEvents: true,
    });
    expect(judgeAppend(read({ lastSeq: 4 }, []), expected)).toEqual({ found: "none" });
    expect(judgeAppend(read({ epoch: 8 }), expected)).toEqual({ found: "moved" });
    expect(judgeAppend(null, expected)).toEqual({ found: "moved" });
    expect(judgeAppend(read({}, [{ ...mine, md5: md5Of("other") }]), expected)).toEqual({ found: "moved" });
    expect(judgeAppend(read({}, [{ ...mine, run_id: "r2" }]), expected)).toEqual({ found: "moved" });
    expect(judgeAppend(read({ lastSeq: 6 }), expected)).toEqual({ found: "moved" });
  });
});

describe("a run's writes through a Postgres outage (real Postgres, a TCP proxy)", () => {
  let fleet: FleetEnv;
  let proxy: PgProxy;
  let queries: SessionQueries;
  /** The fleet's own connections, straight to Postgres (the other holder, the checks). */
  let direct: FencedWrites;
  /** The worker's connection, through the proxy. */
  let viaProxy: Database;
  let writes: FencedWrites;

  beforeAll(async () => {
    proxy = await startPgProxy();
    fleet = await createFleetEnv("dbrideout", { viaDatabase: (url) => proxy.urlFor(url) });
    queries = new SessionQueries(fleet.database);
    direct = new FencedWrites(fleet.database);
    viaProxy = openDatabase(fleet.env.DATABASE_URL!, { max: 2, silenceMs: 3_000 });
    writes = new FencedWrites(viaProxy);
  }, 60_000);
  afterAll(async () => {
    await proxy?.restore();
    await viaProxy?.close();
    await fleet?.close();
    await proxy?.close();
  });

  /** A new session claimed through the proxy, with its first message stored: its fence and cursor. */
  async function claimed(): Promise<{ fence: Fence; cursor: HistoryCursor }> {
    const { id } = await queries.createSession({ agent: AGENT });
    const claim = await writes.claimSession(id, "worker-a");
    const fence = { sessionId: id, epoch: claim!.epoch };
    const [first] = await writes.append(
      fence,
      { lastSeq: 0, lastStepSeq: null },
      null,
      [user("hello")],
      "awaiting_model",
    );
    expect(first!.seq).toBe(1);
    return { fence, cursor: { lastSeq: 1, lastStepSeq: null } };
  }

  function rideout(
    windowMs: number,
    signal = new AbortController().signal,
    log = quiet,
    sleep: RideoutDeps["sleep"] = abortableSleep,
  ) {
    const results: DbRideoutResult[] = [];
    const deps: RideoutDeps = {
      windowMs,
      signal,
      sleep,
      sessionId: "s",
      log,
      onResult: (result) => results.push(result),
    };
    return { writes: ridingOutWrites(writes, deps), results };
  }

  async function stored(sessionId: string) {
    return fleet.database.sql<{ seq: number; content: string }[]>`
      select seq, content from messages where session_id = ${sessionId} order by seq`;
  }

  async function modelCalls(sessionId: string): Promise<number> {
    const [row] = await fleet.database.sql<{ model_calls: number }[]>`
      select model_calls from sessions where id = ${sessionId}`;
    return row!.model_calls;
  }

  async function tokensUsed(sessionId: string): Promise<number> {
    const [row] = await fleet.database.sql<{ tokens_used: string }[]>`
      select tokens_used::text from sessions where id = ${sessionId}`;
    return Number(row!.tokens_used);
  }

  /** Statements of this test's database waiting for a lock. */
  async function lockWaiters(): Promise<number> {
    const [row] = await fleet.database.sql<{ n: number }[]>`
      select count(*)::int as n from pg_stat_activity
       where datname = current_database() and wait_event_type = 'Lock'`;
    return row!.n;
  }

  /**
   * Runs `write` while the session's row is locked: once its first try waits for the lock in
   * Postgres, its connection is reset (the statement runs on, its answer lost) and the retry
   * is let through; once the retry waits behind it too, the lock is released. How `write` settled.
   */
  async function whileFirstTryWaits<T>(sessionId: string, write: () => Promise<T>): Promise<T | unknown> {
    let release = () => {};
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    let locked = () => {};
    const isLocked = new Promise<void>((resolve) => {
      locked = resolve;
    });
    const lock = fleet.database.sql.begin(async (tx) => {
      await tx`select 1 from sessions where id = ${sessionId} for update`;
      locked();
      await held;
    });
    await isLocked;
    const settled = write().then(
      (value) => value,
      (error: unknown) => error,
    );
    await waitFor(async () => (await lockWaiters()) === 1, 10_000, "the first try waiting for the lock");
    await proxy.reset();
    await proxy.restore();
    await waitFor(async () => (await lockWaiters()) === 2, 10_000, "the retry waiting behind it");
    release();
    await lock;
    return settled;
  }

  it("an append that committed but whose answer was lost is found, stored once, and the run goes on", async () => {
    const { fence, cursor } = await claimed();
    const ride = rideout(10_000);
    const cut = proxy.dropAnswer((sent) => sent.includes("the answer that never came back"));
    const step = await ride.writes.appendStep(
      fence,
      cursor,
      null,
      [assistant("the answer that never came back")],
      "awaiting_model",
    );
    await cut;
    expect(step.stored).toMatchObject([
      { seq: 2, role: "assistant", content: "the answer that never came back" },
    ]);
    expect(step.cancelled).toBe(false);
    expect(ride.results).toEqual(["stored"]);
    // The next append goes on from there, fenced as ever.
    await ride.writes.append(fence, { lastSeq: 2, lastStepSeq: 2 }, null, [user("next")], "awaiting_model");
    expect(await stored(fence.sessionId)).toEqual([
      { seq: 1, content: "hello" },
      { seq: 2, content: "the answer that never came back" },
      { seq: 3, content: "next" },
    ]);
  }, 30_000);

  it("a run's last step committed with its end, answer lost: found, the run ended once", async () => {
    const { id } = await queries.createSession({ agent: AGENT });
    const { run } = await queries.createRun({ sessionId: id, kind: "run", trigger: "api", input: "hi" });
    const runId = run.id;
    const claim = await writes.claimSession(id, "worker-a", { startFirst: { tail: "awaiting_model" } });
    expect(claim!.started).toMatchObject([{ seq: 1, role: "user", content: "hi" }]);
    const fence = { sessionId: id, epoch: claim!.epoch };
    const ride = rideout(10_000);
    const cut = proxy.dropAnswer((sent) => sent.includes("the last answer, lost"));
    const ended = await ride.writes.appendAndEndRun(
      fence,
      { lastSeq: 1, lastStepSeq: null },
      runId,
      { message: assistant("the last answer, lost", "end_turn"), tail: "completed" },
      "completed",
      { usage: { inputTokens: 1, outputTokens: 1 } },
    );
    await cut;
    expect(ended.stored).toMatchObject([{ seq: 2, content: "the last answer, lost" }]);
    expect(ended.next).toBeNull();
    expect(ride.results).toEqual(["stored"]);
    const runs = await fleet.database.sql`select status, ended_reason from runs where session_id = ${id}`;
    expect(runs).toEqual([{ status: "ended", ended_reason: "completed" }]);
    expect((await stored(id)).map((m) => m.seq)).toEqual([1, 2]);
  }, 30_000);

  it("a model call's reservation that committed but whose answer was lost is counted once", async () => {
    // Retried blindly, the reservation was counted twice: the budget drifted by one call per
    // lost answer, and a reservation of the budget's last call was refused by its own commit.
    const { fence } = await claimed();
    const ride = rideout(10_000);
    const cut = proxy.dropAnswer((sent) => sent.includes(fence.sessionId));
    expect(await ride.writes.reserveModelCall(fence, 2)).toBe(true);
    await cut;
    expect(ride.results).toEqual(["stored"]);
    expect(await modelCalls(fence.sessionId)).toBe(1);
    // Its budget holds exactly: one more call, then none.
    expect(await ride.writes.reserveModelCall(fence, 2)).toBe(true);
    expect(await ride.writes.reserveModelCall(fence, 2)).toBe(false);
    expect(await modelCalls(fence.sessionId)).toBe(2);
  }, 30_000);

  it("a reservation of the budget's last call, answer lost: granted, counted once", async () => {
    const { fence } = await claimed();
    const ride = rideout(10_000);
    const cut = proxy.dropAnswer((sent) => sent.includes(fence.sessionId));
    expect(await ride.writes.reserveModelCall(fence, 1)).toBe(true);
    await cut;
    expect(await modelCalls(fence.sessionId)).toBe(1);
    expect(await ride.writes.reserveModelCall(fence, 1)).toBe(false);
  }, 30_000);

  it("a failed attempt's billed tokens whose answer was lost are counted once, and the next reservation still counts", async () => {
    const { fence } = await claimed();
    const ride = rideout(10_000);
    const before = await tokensUsed(fence.sessionId);
    const cut = proxy.dropAnswer((sent) => sent.includes(fence.sessionId));
    await ride.writes.countBilledTokens(fence, 700);
    await cut;
    expect(ride.results).toEqual(["stored"]);
    expect(await tokensUsed(fence.sessionId)).toBe(before + 700);
    // The reservation that follows (a retry of the failed call) is a write of its own.
    expect(await ride.writes.reserveModelCall(fence, 5)).toBe(true);
    expect(await modelCalls(fence.sessionId)).toBe(1);
    await ride.writes.countBilledTokens(fence, 300);
    expect(await tokensUsed(fence.sessionId)).toBe(before + 1000);
  }, 30_000);

  it("a reservation still running in Postgres when it was sent again: counted once", async () => {
    // The first try waits for the session's row lock when its connection dies; the retry,
    // sent with the same key, waits behind it and reads the row the first try left.
    const { fence } = await claimed();
    const ride = rideout(20_000);
    expect(await whileFirstTryWaits(fence.sessionId, () => ride.writes.reserveModelCall(fence, 1))).toBe(
      true,
    );
    expect(ride.results).toEqual(["stored"]);
    expect(await modelCalls(fence.sessionId)).toBe(1);
  }, 30_000);

  it("an append still running in Postgres when its retry looked: found once it commits, not fenced", async () => {
    // The first try waits for the session's row lock when its connection dies; the retry
    // finds nothing stored yet and sends the append again, which waits behind the first.
    // The first commits, the retry meets `last_seq` moved: its own append, not a move.
    const { fence, cursor } = await claimed();
    const ride = rideout(20_000);
    const settled = await whileFirstTryWaits(fence.sessionId, () =>
      ride.writes.appendStep(fence, cursor, null, [assistant("stored by the first try")], "awaiting_model"),
    );
    expect(settled).toMatchObject({ stored: [{ seq: 2, content: "stored by the first try" }] });
    expect(ride.results).toEqual(["stored"]);
    expect((await stored(fence.sessionId)).map((m) => m.seq)).toEqual([1, 2]);
  }, 30_000);

  it("a run's last step still running in Postgres when its retry looked: found, the run ended once", async () => {
    const { id } = await queries.createSession({ agent: AGENT });
    const { run } = await queries.createRun({ sessionId: id, kind: "run", trigger: "api", input: "hi" });
    const claim = await writes.claimSession(id, "worker-a", { startFirst: { tail: "awaiting_model" } });
    const fence = { sessionId: id, epoch: claim!.epoch };
    const ride = rideout(20_000);
    const settled = await whileFirstTryWaits(id, () =>
      ride.writes.appendAndEndRun(
        fence,
        { lastSeq: 1, lastStepSeq: null },
        run.id,
        { message: assistant("the last answer", "end_turn"), tail: "completed" },
        "completed",
      ),
    );
    expect(settled).toMatchObject({ stored: [{ seq: 2, content: "the last answer" }], next: null });
    expect(ride.results).toEqual(["stored"]);
    const runs = await fleet.database.sql`select status, ended_reason from runs where session_id = ${id}`;
    expect(runs).toEqual([{ status: "ended", ended_reason: "completed" }]);
    expect((await stored(id)).map((m) => m.seq)).toEqual([1, 2]);
  }, 30_000);

  it("a run's end that committed but whose answer was lost: the retry changes nothing and answers the next run", async () => {
    const { id } = await queries.createSession({ agent: AGENT });
    const { run } = await queries.createRun({ sessionId: id, kind: "run", trigger: "api", input: "hi" });
    const claim = await writes.claimSession(id, "worker-a", { startFirst: { tail: "awaiting_model" } });
    const fence = { sessionId: id, epoch: claim!.epoch };
    const { run: queued } = await queries.createRun({
      sessionId: id,
      kind: "run",
      trigger: "api",
      input: "then this",
    });
    const ride = rideout(10_000);
    const cut = proxy.dropAnswer((sent) => sent.includes(run.id));
    const { next } = await ride.writes.endRun(fence, run.id, "completed", {
      usage: { inputTokens: 1, outputTokens: 1 },
    });
    await cut;
    expect(next?.id).toBe(queued.id);
    expect(ride.results).toEqual(["stored"]);
    const runs = await fleet.database.sql`
      select id, status, ended_reason from runs where session_id = ${id} order by created_at`;
    expect(runs).toEqual([
      { id: run.id, status: "ended", ended_reason: "completed" },
      { id: queued.id, status: "queued", ended_reason: null },
    ]);
  }, 30_000);

  it("a holder whose session was claimed during the outage is refused on retry and stores nothing", async () => {
    const { fence, cursor } = await claimed();
    const ride = rideout(20_000);
    await proxy.reset();
    const append = ride.writes.append(fence, cursor, null, [assistant("too late")], "awaiting_model");
    const settled = append.then(
      () => null,
      (error: unknown) => error,
    );
    // Another worker takes the session while this one cannot reach Postgres.
    await direct.claimSession(fence.sessionId, "worker-b");
    await proxy.restore();
    expect(await settled).toBeInstanceOf(FencedError);
    expect(ride.results).toEqual(["fenced"]);
    expect((await stored(fence.sessionId)).map((m) => m.seq)).toEqual([1]);
  }, 30_000);

  it("past the window the write fails with Postgres' own error, as before", async () => {
    const { fence, cursor } = await claimed();
    const ride = rideout(600);
    await proxy.reset();
    const error = await ride.writes.append(fence, cursor, null, [assistant("never")], "awaiting_model").then(
      () => null,
      (e: unknown) => e,
    );
    await proxy.restore();
    expect(isServiceUnavailable(error)).toBe(true);
    expect(ride.results).toEqual(["gave_up"]);
    expect((await stored(fence.sessionId)).map((m) => m.seq)).toEqual([1]);
  }, 30_000);

  it("a job stopped during the ride-out (shutdown, cancel) gives up at once", async () => {
    const { fence, cursor } = await claimed();
    const stop = new AbortController();
    let riding = () => {};
    const began = new Promise<void>((resolve) => {
      riding = resolve;
    });
    const ride = rideout(60_000, stop.signal, { ...quiet, warn: () => riding() });
    await proxy.reset();
    const settled = ride.writes.append(fence, cursor, null, [assistant("stopped")], "awaiting_model").then(
      () => null,
      (e: unknown) => e,
    );
    await began;
    stop.abort(new Error("worker shutting down"));
    const error = await settled;
    await proxy.restore();
    expect(isServiceUnavailable(error)).toBe(true);
    expect(ride.results).toEqual(["gave_up"]);
  }, 30_000);

  it("a job cancelled once Postgres is back, while the ride-out waits: one last try stores the write", async () => {
    // A cancel commits in Postgres before the API publishes it: when it reaches the worker,
    // Postgres answers again. The ride-out waiting out its backoff must not give the write up
    // with the stale outage error (the job failed, the tool's result was lost, the run ended
    // crashed instead of cancelled): it tries once more, as any write after an abort does.
    const { fence, cursor } = await claimed();
    const stop = new AbortController();
    let riding = () => {};
    const began = new Promise<void>((resolve) => {
      riding = resolve;
    });
    // The backoff's pause lasts until the job is stopped: no retry before the cancel.
    const untilStopped: RideoutDeps["sleep"] = (_ms, signal) =>
      new Promise((_resolve, reject) => {
        if (signal.aborted) reject(signal.reason);
        else signal.addEventListener("abort", () => reject(signal.reason), { once: true });
      });
    const ride = rideout(60_000, stop.signal, { ...quiet, warn: () => riding() }, untilStopped);
    await proxy.reset();
    const settled = ride.writes
      .append(fence, cursor, null, [assistant("finished during the outage")], "awaiting_model")
      .then(
        (stored) => stored,
        (e: unknown) => e,
      );
    await began;
    await proxy.restore();
    stop.abort(new Error("session cancelled"));
    expect(await settled).toMatchObject([{ seq: 2, content: "finished during the outage" }]);
    expect(ride.results).toEqual(["stored"]);
    expect((await stored(fence.sessionId)).map((m) => m.seq)).toEqual([1, 2]);
  }, 30_000);

  it("with a window of 0 nothing is retried (today's behaviour)", async () => {
    const { fence, cursor } = await claimed();
    const ride = rideout(0);
    await proxy.reset();
    const error = await ride.writes.append(fence, cursor, null, [assistant("no")], "awaiting_model").then(
      () => null,
      (e: unknown) => e,
    );
    await proxy.restore();
    expect(isServiceUnavailable(error)).toBe(true);
    expect(ride.results).toEqual([]);
  }, 30_000);
});

function user(content: string): Message {
  return { role: "user", content };
}

function assistant(content: string, stopReason = "tool_use"): Message {
  return { role: "assistant", content, stopReason, usage: { inputTokens: 1, outputTokens: 1 } };
}
