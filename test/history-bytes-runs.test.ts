/**
 * The bound on what a session's history holds (MAX_HISTORY_BYTES, about 32 MiB: every reader
 * of a session holds all of it) holds within a run too. A model's step may be up to
 * FLEET_MODEL_MAX_OUTPUT_CHARS (4,000,000), and a run makes up to maxTurns (at most 1,000) of
 * them: before, one message to an agent whose model answered 3 MB and a tool call at every
 * step grew the session by 3 MB a step to maxTurns — 180 MB in 15 s at maxTurns 60, about
 * 4 GB at 1,000 — which each later claim, whole GET and model request then held in full (a
 * scripted model, or any endpoint a caller may name, that takes any context). Now, once the
 * history passes the bound, no more model calls are made: the run ends `budget_exhausted`
 * and the session is parked `budget_exhausted: history: …`, past the bound by at most a step;
 * a new message is then refused `409 history_full`. A real `fleet worker` process.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { MAX_HISTORY_BYTES } from "../src/producer/request-limits.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const STEP = 3_000_000;

describe("a session's history bound holds within a run", () => {
  let fleet: FleetEnv;
  let client: FleetClient;

  beforeAll(async () => {
    fleet = await createFleetEnv("historyruns");
    client = (await fleet.startApi()).client;
    await fleet.spawnWorker();
  }, 120_000);
  afterAll(async () => fleet?.close());

  it("stops calling the model once the history passes the bound, and parks the session naming it", async () => {
    const { id } = await client.createSession({
      agent: {
        model: {
          provider: "scripted",
          steps: [{ text: "x".repeat(STEP), toolCalls: [{ name: "sleep", arguments: { ms: 0 } }] }],
        },
        tools: ["sleep"],
        maxTurns: 40,
      },
    });
    const { runId } = await client.send(id, "go");
    const run = await client.waitForRun(runId, { timeoutMs: 120_000 });
    const session = await client.getSession(id, { limit: 1 });
    const [row] = await fleet.database.sql<{ b: string }[]>`
      select history_bytes::text as b from sessions where id = ${id}`;
    const steps = Math.floor(MAX_HISTORY_BYTES / STEP) + 1; // the first step past the bound
    expect(session.parkedReason).toMatch(/^budget_exhausted: history: the session's history holds about/);
    expect(run.endedReason).toBe("budget_exhausted");
    expect(Number(row!.b)).toBeGreaterThan(MAX_HISTORY_BYTES);
    expect(Number(row!.b)).toBeLessThan(steps * STEP + 1_000_000);
    await expect(client.send(id, "more")).rejects.toMatchObject({ status: 409, reason: "history_full" });
  }, 180_000);
});
