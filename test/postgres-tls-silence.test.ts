/**
 * TLS connections to Postgres are watched for silence as plain ones are (dead-links.ts): the
 * watched socket factory negotiates TLS itself (tls-negotiation.ts), so what it counts is the
 * cleartext. Through a TLS-terminating front (test/support/tls-pg-proxy.ts, a self-signed
 * certificate) before a TCP proxy that can blackhole (test/support/pg-proxy.ts):
 * - `sslmode=require` (and `sslnegotiation=direct`): a statement sent after the blackhole fails
 *   as Postgres unavailable after `silenceMs`, and the pool goes on with a new TLS connection;
 *   a pipelined statement left unanswered behind an answered one fails too. Before, the TLS
 *   socket postgres.js made on the factory's was not watched: the statements waited for good.
 * - `sslmode=prefer` against a server answering 'N' goes on in the clear, watched;
 *   `sslmode=require` against it fails with an error that says so (before: an obscure reset).
 * - `verify-full` checks the certificate as postgres.js does, and an `ssl` object is used as it is.
 */
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Database, openDatabase } from "../src/shared/db/client.js";
import { watchedSockets } from "../src/shared/db/dead-links.js";
import { isServiceUnavailable } from "../src/shared/unavailable.js";
import { type PgProxy, startPgProxy } from "./support/pg-proxy.js";
import { startTlsPgProxy, type TlsPgProxy } from "./support/tls-pg-proxy.js";

const ADMIN_URL = process.env.TEST_ADMIN_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
const realTimeout = globalThis.setTimeout;
const realPause = (ms: number) => new Promise((r) => realTimeout(r, ms));
const STILL_WAITING = "still waiting after 10 s";
/** What `statement` came to: its rows, or its error (within 10 s). */
const outcome = (statement: Promise<unknown>) =>
  Promise.race([
    statement.then(
      (rows) => rows,
      (e: unknown) => e,
    ),
    realPause(10_000).then(() => STILL_WAITING),
  ]);

describe("TLS connections to a Postgres that stops answering", () => {
  let proxy: PgProxy;
  let tls: TlsPgProxy;
  let refusing: TlsPgProxy;
  beforeAll(async () => {
    proxy = await startPgProxy();
    tls = await startTlsPgProxy(proxy.port);
    refusing = await startTlsPgProxy(proxy.port, { refuseTls: true });
  });
  afterAll(async () => {
    await tls?.close();
    await refusing?.close();
    await proxy?.close();
  });

  /** A statement on `database`'s one connection gets no answer, ever: it fails after 1 s, then the pool goes on. */
  async function dropsTheSilentConnection(database: Database) {
    await proxy.restore();
    proxy.blackhole();
    const waiting = outcome(database.sql`select 1`);
    // Back for new connections; the one the statement was sent on stays unanswered for good.
    await realPause(200);
    await proxy.restore({ keepHung: true });
    const error = await waiting;
    expect(isServiceUnavailable(error), String(error)).toBe(true);
    expect((error as Error).message).toMatch(/sent nothing for 1 s/);
    // A statement given to the connection before its close is seen fails like it; then a new one is made.
    let rows: unknown = null;
    for (let attempt = 0; attempt < 3 && rows === null; attempt++)
      rows = await database.sql`select 2 as two`.catch(() => null);
    expect(rows).toEqual([{ two: 2 }]);
  }

  it("sslmode=require: drops a connection that never answers again, and goes on with a new TLS one", async () => {
    const database = openDatabase(tls.urlFor(ADMIN_URL, { sslmode: "require" }), {
      max: 1,
      silenceMs: 1_000,
    });
    try {
      await database.sql`select 1`;
      const secured = tls.secured();
      expect(secured).toBeGreaterThan(0);
      await dropsTheSilentConnection(database);
      expect(tls.secured()).toBeGreaterThan(secured);
      expect(tls.plain()).toBe(0);
    } finally {
      await database.close();
    }
  }, 60_000);

  it("sslmode=require: drops a connection whose pipelined statement is never answered, though an earlier one was", async () => {
    await proxy.restore();
    const database = openDatabase(tls.urlFor(ADMIN_URL, { sslmode: "require" }), {
      max: 1,
      silenceMs: 1_000,
    });
    try {
      await database.sql`select 1`;
      // One connection: the second statement goes out on it behind the first, before any answer.
      const first = database.sql`select 1 as one`.then((rows) => rows);
      const second = outcome(database.sql`select 2 as two from pg_sleep(0.5)`);
      expect(await first).toEqual([{ one: 1 }]);
      // The first's answer came back; the second's never will.
      proxy.blackhole();
      await proxy.restore({ keepHung: true });
      const error = await second;
      expect(isServiceUnavailable(error), String(error)).toBe(true);
    } finally {
      await database.close();
    }
  }, 30_000);

  it("sslnegotiation=direct: the TLS connection is watched too", async () => {
    const url = tls.urlFor(ADMIN_URL, { sslmode: "require", sslnegotiation: "direct" });
    const database = openDatabase(url, { max: 1, silenceMs: 1_000 });
    try {
      await database.sql`select 1`;
      await dropsTheSilentConnection(database);
    } finally {
      await database.close();
    }
  }, 60_000);

  it("sslmode=prefer against a server without TLS goes on in the clear, watched", async () => {
    const plainBefore = refusing.plain();
    const database = openDatabase(refusing.urlFor(ADMIN_URL, { sslmode: "prefer" }), {
      max: 1,
      silenceMs: 1_000,
    });
    try {
      expect(await database.sql`select 1 as one`).toEqual([{ one: 1 }]);
      expect(refusing.plain()).toBeGreaterThan(plainBefore);
      await dropsTheSilentConnection(database);
    } finally {
      await database.close();
    }
  }, 60_000);

  it("sslmode=require against a server without TLS fails, saying so", async () => {
    await proxy.restore();
    const database = openDatabase(refusing.urlFor(ADMIN_URL, { sslmode: "require" }), {
      max: 1,
      silenceMs: 1_000,
    });
    try {
      const error = await outcome(database.sql`select 1`);
      expect(error).toBeInstanceOf(Error);
      expect((error as Error).message).toMatch(/^Postgres at localhost:\d+ does not accept TLS .*"require"/);
      // Not taken for an outage (a 503 to retry): the configuration asks for what the server refuses.
      expect(isServiceUnavailable(error)).toBe(false);
    } finally {
      await database.close();
    }
  }, 30_000);

  it("checks the certificate for verify-full as postgres.js does, and uses an ssl object as it is", async () => {
    await proxy.restore();
    const verifying = openDatabase(tls.urlFor(ADMIN_URL, { sslmode: "verify-full" }), {
      max: 1,
      silenceMs: 1_000,
    });
    const url = tls.urlFor(ADMIN_URL);
    // postgres.js's types do not list `socket`.
    const trustingOptions = {
      max: 1,
      onnotice: () => {},
      ssl: false,
      socket: watchedSockets(1_000, { ssl: { ca: tls.cert }, direct: false }),
    };
    const trusting = postgres(url, trustingOptions);
    try {
      const refused = await outcome(verifying.sql`select 1`);
      expect(String(refused)).toMatch(/self-signed certificate/);
      const secured = tls.secured();
      expect(await trusting`select 1 as one`).toEqual([{ one: 1 }]);
      expect(tls.secured()).toBe(secured + 1);
    } finally {
      await verifying.close();
      await trusting.end({ timeout: 1 });
    }
  }, 30_000);
});
