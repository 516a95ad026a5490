/**
 * A sweeper that stops leaves no statement of its own running in Postgres. A wide scan held
 * on a locked row (an expired idempotency key another transaction holds, as in
 * sweeper-passes.test.ts) waited there after SIGTERM: the stop waited for the scan, gave up
 * 10 s later (exit 1), and the statement went on waiting in Postgres after the process had
 * exited, holding its connection, until the lock was released. Now the stop cancels it.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadConfig } from "../src/shared/config.js";
import { taggedConnection } from "../src/shared/db/own-statements.js";
import { startSweeper } from "../src/sweeper/sweeper-process.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { type HeldKey, holdExpiredKeyLocked } from "./support/sweeps.js";

describe("a sweeper stopping while a statement of its waits on a lock", () => {
  let fleet: FleetEnv;
  let held: HeldKey | undefined;

  beforeAll(async () => {
    fleet = await createFleetEnv("sweeperstop");
    const { sql } = fleet.database;
    held = await holdExpiredKeyLocked(sql);
  });
  afterAll(async () => {
    held?.release();
    await held?.done.catch(() => {});
    await fleet?.close();
  });

  /** The sweeper's statements still in Postgres: the prune waiting for the locked row. */
  async function pruneStatements(): Promise<{ state: string; wait: string | null; app: string }[]> {
    return fleet.database.sql<{ state: string; wait: string | null; app: string }[]>`
      select state, wait_event_type as wait, application_name as app from pg_stat_activity
       where datname = current_database() and pid <> pg_backend_pid()
         and query like '%delete from idempotency_keys%'`;
  }

  /**
   * Nothing of the stopped sweeper runs any more. Its connection may still be listed, idle, for
   * a moment after the client closed it (the backend leaves pg_stat_activity as it exits, after
   * the socket's close that ended the client's `end()`; seen on a machine at load 23): it must
   * be gone soon, and a statement left waiting on the lock would never go.
   */
  async function expectNoneLeft(left: { state: string }[]): Promise<void> {
    expect(left.filter((s) => s.state !== "idle")).toEqual([]);
    await waitFor(
      async () => (await pruneStatements()).length === 0,
      10_000,
      "the stopped sweeper's connection to close",
    );
  }

  /** Waits for one more prune waiting on the lock than `before` (a sweeper left by the test before). */
  async function waitForHeldPrune(before = 0): Promise<void> {
    await waitFor(
      async () =>
        (await pruneStatements()).filter((s) => s.state === "active" && s.wait === "Lock").length > before,
      30_000,
      "the wide scan's prune waiting for the locked row",
    );
  }

  it("fleet sweeper: SIGTERM cancels it and exits 0, leaving no statement of its own", async () => {
    const sweeper = await fleet.spawnSweeper();
    await waitForHeldPrune();
    const waiting = await pruneStatements();
    console.log("before SIGTERM:", waiting);
    expect(waiting.length).toBe(1);
    sweeper.child.kill("SIGTERM");
    const code = await sweeper.exited;
    const left = await pruneStatements();
    console.log("exit", code, "statements left:", left, sweeper.output().trim());
    await expectNoneLeft(left);
    expect(code).toBe(0);
    // Cancelled, not finished: the row is still there, and still locked by its holder.
    const [row] = await fleet.database.sql<{ n: number }[]>`
      select count(*)::int as n from idempotency_keys where key = 'held'`;
    expect(row!.n).toBe(1);
  }, 90_000);

  it("startSweeper().stop() returns, with no statement of it left and no warning", async () => {
    const before = (await pruneStatements()).length;
    const warnings: unknown[] = [];
    const logger = {
      level: "warn",
      warn: (...args: unknown[]) => warnings.push(args),
      info: () => {},
      debug: () => {},
      error: (...args: unknown[]) => warnings.push(args),
      child: () => logger,
    };
    const sweeper = await startSweeper(
      { ...loadConfig(fleet.env), logLevel: "silent" },
      // biome-ignore lint/suspicious/noExplicitAny: a logger that records warnings only
      { serveMetrics: false, logger: logger as any },
    );
    await waitForHeldPrune(before);
    await sweeper.stop();
    const left = await pruneStatements();
    console.log("statements left after stop():", left, "warnings:", warnings.length);
    await expectNoneLeft(left);
    expect(warnings).toEqual([]);
  }, 90_000);
});

describe("taggedConnection", () => {
  it("names the pool's connections by role, or by the URL's application_name which it takes out of the URL", () => {
    expect(taggedConnection("postgres://u@h/db", "sweeper", "abc", {})).toEqual({
      url: "postgres://u@h/db",
      applicationName: "fleet-sweeper abc",
    });
    expect(
      taggedConnection("postgres://u@h/db?application_name=ops%20é&sslmode=disable", "api", "abc", {}),
    ).toEqual({
      url: "postgres://u@h/db?sslmode=disable",
      applicationName: "ops ? abc",
    });
    expect(
      taggedConnection("postgres://u@h/db", "api", "abc", { PGAPPNAME: "x".repeat(80) }).applicationName,
    ).toBe(`${"x".repeat(40)} abc`);
  });
});
