/** `fleet demo`, the README's first command, end to end on a fresh database. */
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { demoDatabaseUrl } from "../src/commands/demo.js";
import { databaseName } from "../src/shared/db/client.js";
import { createFleetEnv, FLEET_BIN, type FleetEnv, ROOT } from "./support/fleet-env.js";

const run = promisify(execFile);

describe("fleet demo", () => {
  let fleet: FleetEnv;
  beforeAll(async () => {
    fleet = await createFleetEnv("demo");
  });
  afterAll(async () => {
    // The demo made a database of its own beside the fleet's: drop it too.
    if (fleet) {
      await fleet.database.sql.unsafe(
        `drop database if exists "${databaseName(demoDatabaseUrl(fleet.config.databaseUrl))}" with (force)`,
      );
      await fleet.close();
    }
  });

  it("runs a batch, kills a worker mid-batch, and reports every session completed with no tool run twice", async () => {
    const { stdout } = await run(process.execPath, [FLEET_BIN, "demo", "--sessions", "12"], {
      cwd: ROOT,
      env: { ...process.env, ...fleet.env },
      timeout: 90_000,
    });
    expect(stdout).toMatch(/sessions +12 \(12 completed, 0 parked\)/);
    expect(stdout).toMatch(/answered twice: 0\)/);
    expect(stdout).toMatch(/every session's log line was written exactly once/);
    expect(stdout).toMatch(/✗ SIGKILLed worker \S+ while \d+ of its sessions were inside a tool/);
    expect(stdout).toMatch(/resumes by kind +\w+ \(sweeper\)=\d+/);
    expect(stdout).toMatch(/kill → resume +p50 \d+ ms/);
    // The demo's queue namespace is gone from Redis afterwards.
    const prefix = /queue prefix (\S+)/.exec(stdout)![1]!;
    expect(await fleet.redis.keys(`${prefix}:*`)).toEqual([]);
    // Its sessions are in its own database, not in DATABASE_URL's (where a fleet may run).
    expect(await fleet.database.sql`select 1 from sessions`).toHaveLength(0);
    const demoDb = databaseName(demoDatabaseUrl(fleet.config.databaseUrl));
    const [row] = await fleet.database.sql<
      { n: number }[]
    >`select count(*)::int as n from pg_database where datname = ${demoDb}`;
    expect(row!.n).toBe(1);
  }, 120_000);

  it("runs again on its own database (one fleet per database: the demo owns its database)", async () => {
    // One worker (the default is two): what this case proves is the second run on the same
    // database, which one worker shows as well; the first case runs two and kills one.
    const args = ["demo", "--sessions", "4", "--workers", "1", "--no-kill"];
    const { stdout } = await run(process.execPath, [FLEET_BIN, ...args], {
      cwd: ROOT,
      env: { ...process.env, ...fleet.env },
      timeout: 90_000,
    });
    expect(stdout).toMatch(/fleet demo: 4 sessions, 1 worker process, a sweeper/);
    expect(stdout).toMatch(/sessions +4 \(4 completed, 0 parked\)/);
  }, 120_000);
});
