/**
 * FLEET_RUN_MAX_MS: a run that would hold its worker slot for days (1,000 turns of a sleep, or
 * of scripted steps of 600 s) ends `max_turns` once it has gone on that long. A real API, a real
 * `fleet worker` child, real Postgres and Redis.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

describe("FLEET_RUN_MAX_MS", () => {
  let fleet: FleetEnv;
  beforeAll(async () => {
    fleet = await createFleetEnv("run_max_ms");
  }, 60_000);
  afterAll(() => fleet?.close());

  it("ends a run that would hold its worker slot for 1,000 turns once it has run that long", async () => {
    const { client } = await fleet.startApi();
    // Each turn asks for a 300 ms sleep; the last step repeats: 1,000 turns of ~0.3 s.
    const { id } = await client.createSession({
      agent: {
        model: { provider: "scripted", steps: [{ toolCalls: [{ name: "sleep", arguments: { ms: 300 } }] }] },
        tools: ["sleep"],
        maxTurns: 1000,
      },
    });
    await fleet.spawnWorker({ FLEET_RUN_MAX_MS: "1500" });
    const { runId } = await client.send(id, "go");
    const run = await client.waitForRun(runId, { timeoutMs: 30_000 });
    expect(run.endedReason).toBe("max_turns");
    expect(run.error ?? "").toContain("FLEET_RUN_MAX_MS");
    const session = await client.getSession(id);
    expect(session.status).toBe("parked");
  }, 90_000);
});
