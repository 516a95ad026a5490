/**
 * One database, one fleet: the first process of a fleet records its FLEET_PREFIX in the
 * database, and the API, a worker and a sweeper of another prefix refuse to start (exit 2,
 * one line naming FLEET_PREFIX) — so two fleets on one database never take each other's
 * workers for dead. Shown with a live session of fleet A that fleet B's sweeper would
 * otherwise have ended `crashed` and resumed.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startApi } from "../src/producer/api-server.js";
import { ValidationError } from "../src/shared/errors.js";
import { claimFleet } from "../src/shared/store/fleet-identity.js";
import { runFleetCli } from "./support/fleet-cli.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

/** `fleet ARGS`, its exit code and everything it printed (stdout, then stderr). */
async function runFleet(
  env: Record<string, string>,
  args: string[],
  timeoutMs = 20_000,
): Promise<{ code: number | null; output: string }> {
  const { code, stdout, stderr } = await runFleetCli(args, env, timeoutMs);
  return { code, output: stdout + stderr };
}

describe("one database, one fleet", () => {
  let fleet: FleetEnv;

  beforeAll(async () => {
    fleet = await createFleetEnv("identity");
  }, 60_000);
  afterAll(() => fleet?.close());

  it("records the first prefix; the same prefix is welcome again", async () => {
    await claimFleet(fleet.database, fleet.config.prefix);
    await claimFleet(fleet.database, fleet.config.prefix);
    const rows = await fleet.database.sql<{ prefix: string }[]>`select prefix from fleet_identity`;
    expect(rows).toEqual([{ prefix: fleet.config.prefix }]);
    await expect(claimFleet(fleet.database, "other")).rejects.toThrow(ValidationError);
    await expect(claimFleet(fleet.database, "other")).rejects.toThrow(
      new RegExp(`belongs to the fleet with FLEET_PREFIX=${fleet.config.prefix}, not other`),
    );
  });

  it("a worker, a sweeper and an API of another prefix refuse to start; fleet A's session is untouched", async () => {
    const { client } = await fleet.startApi();
    await fleet.spawnWorker();
    const agent = {
      model: {
        provider: "scripted" as const,
        steps: [{ toolCalls: [{ id: "nap", name: "sleep", arguments: { ms: 3_000 } }] }, { text: "done" }],
      },
      tools: ["sleep"],
    };
    const { id } = await client.createSession({ agent });
    const { runId } = await client.send(id, "go");
    const other = { ...fleet.env, FLEET_PREFIX: `${fleet.env.FLEET_PREFIX}-b`, METRICS_PORT: "0" };
    for (const role of ["worker", "sweeper"]) {
      const result = await runFleet(other, [role]);
      expect(result.code, result.output).toBe(2);
      const lines = result.output.trim().split("\n");
      expect(lines, result.output).toHaveLength(1);
      expect(lines[0]).toMatch(/FLEET_PREFIX/);
      expect(lines[0]).toMatch(/belongs to the fleet with FLEET_PREFIX=/);
      expect(result.output).not.toMatch(/ {4}at /);
    }
    await expect(
      startApi({ ...fleet.config, prefix: other.FLEET_PREFIX, logLevel: "silent" }, { port: 0 }),
    ).rejects.toThrow(/FLEET_PREFIX/);
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.endedReason).toBe("completed");
    const runs = await fleet.database.sql`select 1 from runs where session_id = ${id}`;
    expect(runs).toHaveLength(1);
  });
});
