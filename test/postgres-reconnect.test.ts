/**
 * How a pool (openDatabase) behaves while Postgres is cut off and once it is back, through
 * a TCP proxy (test/support/pg-proxy.ts):
 * - a statement given to a connection between its error and its close (a retry in the failed
 *   statement's `catch`) fails too, instead of waiting unsent until another statement makes
 *   the connection connect again (scripts/patch-postgres.mjs, patch 3);
 * - a server that closes each connection at once (a proxy or load balancer with no Postgres
 *   behind it, PgBouncer restarting) fails the statement that asked for the connection, and
 *   those waiting in the pool, with CONNECTION_CLOSED, and is tried again after the backoff
 *   (scripts/patch-postgres.mjs, patch 7). postgres.js connected again at once, for ever,
 *   and the statements waited as long (porsager/postgres#1193): thousands of connections a
 *   second, watched sockets (silenceMs) or not;
 * - with `sslmode=prefer` (the SSLRequest negotiated by the watched sockets), a connect that
 *   failed before its start-up message was written (the SSLRequest reset or closed) left that
 *   write scheduled and cancelled: postgres.js then wrote nothing on any later connection of
 *   the pool, each timed out (CONNECT_TIMEOUT, 10 s) and the pool never recovered once
 *   Postgres was back (scripts/patch-postgres.mjs, patch 8);
 * - after many failed connects, the next one is tried within a second, not after postgres.js's
 *   own backoff (up to 20 s, during which a statement waits: an API request was answered 503
 *   after 11 s, and the first after the outage after 1.3-2.6 s; the unit test checks the bound);
 * - a connection that never answers again (a failover's blackhole) is dropped after
 *   `silenceMs` with nothing back: its statement fails as Postgres unavailable, and the next
 *   one goes through a new connection. Before, both waited for good. So is one whose statement
 *   with parameters was sent as Parse, Describe, Flush (no Sync yet): before, it was not
 *   counted as owed an answer, and waited for good.
 */

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openDatabase, reconnectDelaySeconds } from "../src/shared/db/client.js";
import { OwedAnswers } from "../src/shared/db/dead-links.js";
import { isServiceUnavailable } from "../src/shared/unavailable.js";
import { type PgProxy, startPgProxy } from "./support/pg-proxy.js";

const ADMIN_URL = process.env.TEST_ADMIN_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
const realTimeout = globalThis.setTimeout;
const realPause = (ms: number) => new Promise((r) => realTimeout(r, ms));

describe("a pool while Postgres is cut off", () => {
  let proxy: PgProxy;
  beforeAll(async () => {
    proxy = await startPgProxy();
  });
  afterAll(async () => {
    await proxy?.close();
  });

  it("reconnect delays stay within a second however many connects failed", () => {
    for (let n = 0; n <= 60; n++) {
      expect(reconnectDelaySeconds(n, () => 1)).toBeLessThanOrEqual(1);
      expect(reconnectDelaySeconds(n, () => 0)).toBeGreaterThan(0);
    }
  });

  it("fails a statement sent right after a reset's error, instead of keeping it unsent", async () => {
    const database = openDatabase(proxy.urlFor(ADMIN_URL), { max: 1 });
    try {
      await database.sql`select 1`;
      await proxy.reset();
      // The retry is given to the connection in the first failure's own handler.
      const second = await database.sql`select 1`.then(
        () => "answered",
        () =>
          Promise.race([
            database.sql`select 2`.then(
              () => "answered",
              (e: unknown) => (isServiceUnavailable(e) ? "failed as unavailable" : `failed: ${e}`),
            ),
            realPause(10_000).then(() => "still waiting after 10 s"),
          ]),
      );
      expect(second).toBe("failed as unavailable");
    } finally {
      await proxy.restore();
      await database.close();
    }
  }, 30_000);

  for (const silenceMs of [0, 3_000])
    it(`fails the statements when each connection is closed at once, without a reconnect loop, and goes on once Postgres is back (silenceMs ${silenceMs})`, async () => {
      const database = openDatabase(proxy.urlFor(ADMIN_URL), { max: 2, silenceMs });
      try {
        await database.sql`select 1`;
        proxy.closeEach();
        const before = proxy.connects();
        // Four statements on two connections: two wait in the pool for one.
        const outcomes = await Promise.all(
          [1, 2, 3, 4].map((n) =>
            Promise.race([
              database.sql`select ${n}::int as n`.then(
                () => "answered",
                (e: unknown) =>
                  isServiceUnavailable(e) ? `unavailable: ${(e as Error).message}` : `failed: ${e}`,
              ),
              realPause(10_000).then(() => "still waiting after 10 s"),
            ]),
          ),
        );
        const connects = proxy.connects() - before;
        console.log(`closed at once (silenceMs ${silenceMs}): ${connects} connections attempted`, outcomes);
        for (const outcome of outcomes)
          expect(outcome).toMatch(
            /^unavailable: write CONNECTION_CLOSED 127\.0\.0\.1:\d+( \(closed during start-up, before any answer from Postgres\))?$/,
          );
        // Those that asked for a new connection (all but the first, which may go on the one open) say why.
        expect(outcomes.filter((o) => o.includes("closed during start-up")).length).toBeGreaterThanOrEqual(3);
        // One attempt for each connection a statement asked for (the loop made thousands a second).
        expect(connects).toBeLessThanOrEqual(4);
        await proxy.restore();
        // Back: the next statement goes through (after the backoff: within a second).
        expect(await database.sql`select 5::int as n`).toEqual([{ n: 5 }]);
      } finally {
        await proxy.restore();
        await database.close();
      }
    }, 60_000);

  for (const cut of ["reset", "closeEach"] as const)
    it(`with sslmode=prefer, goes on once Postgres is back after connects failed before their start-up (${cut})`, async () => {
      const url = new URL(proxy.urlFor(ADMIN_URL));
      url.searchParams.set("sslmode", "prefer");
      const database = openDatabase(url.toString(), { max: 1, silenceMs: 3_000 });
      const outcome = (n: number) =>
        Promise.race([
          database.sql`select ${n}::int as n`.then(
            (rows) => JSON.stringify(rows),
            (e: unknown) => `failed: ${(e as { code?: string }).code}`,
          ),
          realPause(15_000).then(() => "still waiting after 15 s"),
        ]);
      try {
        expect(await outcome(1)).toBe('[{"n":1}]');
        if (cut === "reset") await proxy.reset();
        else proxy.closeEach();
        // The open connection is lost; the next one fails while negotiating, before its start-up.
        expect(await outcome(2)).toMatch(/^failed: (CONNECTION_CLOSED|ECONNRESET)$/);
        expect(await outcome(3)).toMatch(/^failed: (CONNECTION_CLOSED|ECONNRESET)$/);
        await proxy.restore();
        expect(await outcome(4)).toBe('[{"n":4}]');
        expect(await outcome(5)).toBe('[{"n":5}]');
      } finally {
        await proxy.restore();
        await database.close();
      }
    }, 60_000);

  it("drops a connection that never answers again, and goes on with a new one", async () => {
    const database = openDatabase(proxy.urlFor(ADMIN_URL), { max: 1, silenceMs: 1_000 });
    try {
      await database.sql`select 1`;
      proxy.blackhole();
      const waiting = database.sql`select 1`.then(
        () => null,
        (e: unknown) => e,
      );
      // Back for new connections; the one the statement was sent on stays unanswered for good.
      await realPause(200);
      await proxy.restore({ keepHung: true });
      const error = await waiting;
      expect(isServiceUnavailable(error)).toBe(true);
      expect((error as Error).message).toMatch(/sent nothing for 1 s/);
      // A statement given to the connection before its close is seen fails like it; then a new one is made.
      let rows: unknown = null;
      for (let attempt = 0; attempt < 3 && rows === null; attempt++)
        rows = await database.sql`select 2 as two`.catch(() => null);
      expect(rows).toEqual([{ two: 2 }]);
    } finally {
      await database.close();
    }
  }, 60_000);

  it("drops a connection whose pipelined statement is never answered, though an earlier one was", async () => {
    const database = openDatabase(proxy.urlFor(ADMIN_URL), { max: 1, silenceMs: 1_000 });
    try {
      await database.sql`select 1`;
      // One connection: the second statement goes out on it behind the first, before any answer.
      // (A postgres.js query is sent when it is first awaited or given a `then`.)
      const first = database.sql`select 1 as one`.then((rows) => rows);
      const second = database.sql`select 2 as two from pg_sleep(0.5)`.then(
        () => null,
        (e: unknown) => e,
      );
      expect(await first).toEqual([{ one: 1 }]);
      // The first's answer came back; the second's never will.
      proxy.blackhole();
      await proxy.restore({ keepHung: true });
      const error = await Promise.race([second, realPause(10_000).then(() => "still waiting after 10 s")]);
      expect(isServiceUnavailable(error), String(error)).toBe(true);
    } finally {
      await database.close();
    }
  }, 30_000);

  it("drops a connection whose statement with parameters, sent as Parse, Describe, Flush, is never answered", async () => {
    const database = openDatabase(proxy.urlFor(ADMIN_URL), { max: 1, silenceMs: 1_000 });
    try {
      await database.sql`select 1`;
      proxy.blackhole();
      // Not yet prepared on this connection: postgres.js asks for its description first, with
      // no Sync, and sends the rest once it is back. It waited for good.
      const waiting = database.sql`select ${7}::int as n`.then(
        () => null,
        (e: unknown) => e,
      );
      const error = await Promise.race([waiting, realPause(10_000).then(() => "still waiting after 10 s")]);
      expect(isServiceUnavailable(error), String(error)).toBe(true);
      expect((error as Error).message).toMatch(/sent nothing for 1 s/);
    } finally {
      await proxy.restore();
      await database.close();
    }
  }, 30_000);

  it("ends a pool whose connection was lost with a statement on it, whether the end comes before its close or after", async () => {
    // postgres.js kept the failed statement as the one in flight, and `sql.end()` (no timeout)
    // waited for it for good; with the pools' timeout, each such close took 5 s
    // (scripts/patch-postgres.mjs, patch 5).
    for (const endAt of ["at the error", "after the close"] as const) {
      const database = openDatabase(proxy.urlFor(ADMIN_URL), { max: 1, silenceMs: 1_000 });
      let closed = false;
      database.sql.options.onclose = () => {
        closed = true;
      };
      let ended = "not yet asked to end";
      try {
        await database.sql`select 1`;
        proxy.blackhole();
        const error = await database.sql`select 1 as one`.then(
          () => null,
          (e: unknown) => e,
        );
        expect(isServiceUnavailable(error), String(error)).toBe(true);
        // The statement fails at the socket's error; its `close` comes a turn of the loop later.
        expect(closed, endAt).toBe(false);
        if (endAt === "after the close") while (!closed) await realPause(10);
        ended = await Promise.race([
          database.sql.end().then(() => "ended"),
          realPause(10_000).then(() => "still waiting after 10 s"),
        ]);
        expect(ended, endAt).toBe("ended");
      } finally {
        await proxy.restore();
        // An end that never came would hold this close too (postgres.js answers it with the first).
        if (ended !== "still waiting after 10 s") await database.close();
      }
    }
  }, 30_000);

  it("fails the statements waiting for a connection with the one taken for lost, not one new connection's window each", async () => {
    // Two connections, each given a statement not yet prepared on it (Parse, Describe, Flush:
    // postgres.js gives it nothing more until its description is back), and six more waiting
    // in the pool for a connection. Before, each of the six in turn got a new connection of
    // its own when one was dropped, which the blackhole took too: a window each (the last
    // failed after about 3 windows here; with 40 waiting for 6 connections, 7 windows of 15 s).
    const database = openDatabase(proxy.urlFor(ADMIN_URL), { max: 2, silenceMs: 1_000 });
    try {
      await Promise.all([
        database.sql`select 1 from pg_sleep(0.1)`,
        database.sql`select 2 from pg_sleep(0.1)`,
      ]);
      proxy.blackhole();
      const before = proxy.connects();
      const errors = await Promise.all(
        Array.from({ length: 8 }, (_, i) =>
          database.sql`select ${i}::int as n`.then(
            () => null,
            (e: unknown) => e,
          ),
        ),
      );
      expect(errors.map((e) => isServiceUnavailable(e))).toEqual(Array(8).fill(true));
      // No new connection was opened (and waited for) for any of them.
      expect(proxy.connects() - before).toBe(0);
      await proxy.restore();
      let rows: unknown = null;
      for (let attempt = 0; attempt < 3 && rows === null; attempt++)
        rows = await database.sql`select 3 as three`.catch(() => null);
      expect(rows).toEqual([{ three: 3 }]);
    } finally {
      await proxy.restore();
      await database.close();
    }
  }, 60_000);

  it("keeps the statements waiting for a connection when another connection of the pool still hears Postgres", async () => {
    // A statement that runs longer than silenceMs is cut off as lost, but Postgres is not
    // silent: the pool's other connection (reserved here, so the statement below waits in
    // the pool) hears a notice every 0.1 s. What waits for a connection then goes on as before.
    const database = openDatabase(proxy.urlFor(ADMIN_URL), { max: 2, silenceMs: 1_000 });
    // Both connections open first (a reserve on a pool with none open waited for good).
    await Promise.all([database.sql`select 1 from pg_sleep(0.1)`, database.sql`select 2 from pg_sleep(0.1)`]);
    const other = await database.sql.reserve();
    try {
      // (A postgres.js query is sent when it is first given a `then`.)
      const ticking = other
        .unsafe(
          "do $$ begin for i in 1..25 loop raise notice 'tick'; perform pg_sleep(0.1); end loop; end $$",
        )
        .then(() => "done");
      const slow = database.sql`select ${1}::int as n from pg_sleep(1.8)`.then(
        () => null,
        (e: unknown) => e,
      );
      const waiting = database.sql`select ${5}::int as five`.then(
        (rows) => rows,
        (e: unknown) => e,
      );
      expect(isServiceUnavailable(await slow)).toBe(true);
      expect(await waiting).toEqual([{ five: 5 }]);
      expect(await ticking).toBe("done");
    } finally {
      other.release();
      await database.close();
    }
  }, 30_000);

  it("owes an answer for a Flush until its answer ends, behind what was sent before it", () => {
    const answers = new OwedAnswers();
    const message = (type: string, body: number[] = []) => [
      type.charCodeAt(0),
      0,
      0,
      0,
      4 + body.length,
      ...body,
    ];
    const feed = (side: { feed(chunk: Uint8Array): void }, ...messages: number[][]) =>
      side.feed(Uint8Array.from(messages.flat()));
    const ready = message("Z", ["I".charCodeAt(0)]);
    feed(answers.sent, [0, 0, 0, 8, 0, 3, 0, 0]);
    feed(answers.received, message("R", [0, 0, 0, 0]), ready);
    expect(answers.waiting).toBe(false);
    // A statement without parameters (Parse ... Sync), then one with, pipelined behind it.
    feed(answers.sent, message("P", [0, 0]), message("E", [0, 0, 0, 0, 0]), message("S"));
    feed(answers.sent, message("P", [0, 0]), message("D", [0x53, 0]), message("H"));
    // The first one's answer, with its own RowDescription: the second is still owed.
    feed(answers.received, message("1"), message("T", [0, 0]), message("C", [0]), ready);
    expect(answers.waiting).toBe(true);
    feed(answers.received, message("1"), message("t", [0, 0]));
    expect(answers.waiting).toBe(true);
    feed(answers.received, message("T", [0, 0]));
    expect(answers.waiting).toBe(false);
    // Then the rest of it (Bind, Execute, Sync), answered up to its ReadyForQuery.
    feed(answers.sent, message("B", [0, 0]), message("E", [0, 0, 0, 0, 0]), message("S"));
    expect(answers.waiting).toBe(true);
    feed(answers.received, message("2"), message("C", [0]), ready);
    expect(answers.waiting).toBe(false);
    // A statement with no rows (NoData), and one whose Parse fails (ErrorResponse, then postgres.js's Sync).
    feed(answers.sent, message("P", [0, 0]), message("D", [0x53, 0]), message("H"));
    feed(answers.received, message("1"), message("t", [0, 0]), message("n"));
    expect(answers.waiting).toBe(false);
    feed(answers.sent, message("P", [0, 0]), message("D", [0x53, 0]), message("H"));
    feed(answers.received, message("E", [0]));
    expect(answers.waiting).toBe(false);
    feed(answers.sent, message("S"));
    feed(answers.received, ready);
    expect(answers.waiting).toBe(false);
  });

  it("counts the answers a connection is owed from the messages each way, in chunks cut anywhere", () => {
    const answers = new OwedAnswers();
    const message = (type: string, body: number[] = []) => [
      type.charCodeAt(0),
      0,
      0,
      0,
      4 + body.length,
      ...body,
    ];
    const startup = [0, 0, 0, 8, 0, 3, 0, 0];
    // Startup, then two pipelined queries (Parse, Bind, Execute, Sync each), sent byte by byte.
    const sent = [
      ...startup,
      ...message("P", [0, 0]),
      ...message("S"),
      ...message("E", [0, 0, 0, 0, 0]),
      ...message("S"),
    ];
    for (const byte of sent) answers.sent.feed(Uint8Array.of(byte));
    expect(answers.waiting).toBe(true);
    const ready = message("Z", ["I".charCodeAt(0)]);
    // A data row holding the bytes of a ReadyForQuery is not one.
    answers.received.feed(Uint8Array.from([...message("D", ready), ...ready, ...ready]));
    expect(answers.waiting).toBe(true);
    answers.received.feed(Uint8Array.from(ready.slice(0, 3)));
    expect(answers.waiting).toBe(true);
    answers.received.feed(Uint8Array.from(ready.slice(3)));
    expect(answers.waiting).toBe(false);
  });

  it("keeps a slow statement that answers within silenceMs", async () => {
    const database = openDatabase(proxy.urlFor(ADMIN_URL), { max: 1, silenceMs: 3_000 });
    try {
      expect(await database.sql`select 1 as one from pg_sleep(0.5)`).toEqual([{ one: 1 }]);
    } finally {
      await database.close();
    }
  });
});
