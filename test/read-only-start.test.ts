/**
 * A role started against a Postgres that only reads — a standby DATABASE_URL still names after
 * a failover, or `default_transaction_read_only = on` — cannot work there (every run writes).
 * It refuses to start like any other missing service: exit 2, one line naming DATABASE_URL
 * and saying the server is read-only, no stack. Before, it exited 1 with only
 * `fleet: cannot execute SELECT in a read-only transaction`.
 */
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startApi } from "../src/producer/api-server.js";
import { runFleetCli } from "./support/fleet-cli.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

describe("a role started against a read-only Postgres", () => {
  let fleet: FleetEnv;
  let admin: postgres.Sql;
  let dbName: string;

  beforeAll(async () => {
    fleet = await createFleetEnv("read-only-start");
    dbName = new URL(fleet.env.DATABASE_URL!).pathname.slice(1);
    admin = postgres(fleet.env.DATABASE_URL!, { max: 1, onnotice: () => {} });
    await admin.unsafe(`alter database "${dbName}" set default_transaction_read_only = on`);
  }, 60_000);
  afterAll(async () => {
    await admin?.unsafe(`alter database "${dbName}" reset default_transaction_read_only`);
    await admin?.end();
    await fleet?.close();
  });

  it("the worker and the sweeper exit 2 with one line naming DATABASE_URL; the API throws saying so", async () => {
    for (const role of ["worker", "sweeper"]) {
      const { code, stdout, stderr } = await runFleetCli([role], { ...fleet.env, METRICS_PORT: "0" }, 30_000);
      const output = stdout + stderr;
      expect(code, output).toBe(2);
      const lines = output.trim().split("\n");
      expect(lines, output).toHaveLength(1);
      expect(lines[0]).toMatch(new RegExp(`^fleet ${role}: DATABASE_URL: .*read-only`));
      expect(output).not.toMatch(/ {4}at /);
    }
    await expect(startApi({ ...fleet.config, logLevel: "silent" }, { port: 0 })).rejects.toThrow(
      /DATABASE_URL.*read-only/,
    );
  });
});
