/**
 * The operator's bounds on the scripted model (FLEET_SCRIPTED_MODEL, FLEET_SCRIPTED_MAX_DELAY_MS):
 * a tenant with one API key held worker slots at no provider cost with scripted steps of
 * `delayMs` 600 s × `maxTurns` 1,000 (about a week per run). A real API, a real `fleet worker`
 * child, real Postgres and Redis.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetApiError } from "../src/producer/client-errors.js";
import type { AgentConfigInput } from "../src/shared/agent-config.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const slowAgent = (delayMs: number): AgentConfigInput => ({
  model: { provider: "scripted", steps: [{ text: "slow", delayMs }] },
});

async function refusal(work: Promise<unknown>): Promise<FleetApiError> {
  const error = await work.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(FleetApiError);
  return error as FleetApiError;
}

describe("FLEET_SCRIPTED_MODEL=off", () => {
  let fleet: FleetEnv;
  beforeAll(async () => {
    fleet = await createFleetEnv("scripted_off", { env: { FLEET_SCRIPTED_MODEL: "off" } });
  }, 60_000);
  afterAll(() => fleet?.close());

  it("answers 400 naming the model, for a session's agent and its fallback models", async () => {
    const { client } = await fleet.startApi();
    const primary = await refusal(client.createSession({ agent: slowAgent(0) }));
    expect(primary.status).toBe(400);
    expect(primary.field).toBe("agent.model.provider");
    expect(primary.message).toContain("FLEET_SCRIPTED_MODEL");
    const fallback = await refusal(
      client.createSession({
        agent: {
          model: { provider: "openai", model: "gpt-4o-mini" },
          fallbackModels: [{ provider: "scripted", steps: [{ text: "x" }] }],
        },
      }),
    );
    expect(fallback.field).toBe("agent.fallbackModels[0].provider");
  });

  it("a worker with it off fails a stored scripted session's run instead of running it", async () => {
    // The session was stored while the API allowed it (or before the operator turned it off).
    const other = await createFleetEnv("scripted_was_on");
    try {
      const { client } = await other.startApi();
      const { id } = await client.createSession({ agent: slowAgent(600_000) });
      await other.spawnWorker({ FLEET_SCRIPTED_MODEL: "off" });
      const { runId } = await client.send(id, "go");
      const run = await client.waitForRun(runId, { timeoutMs: 30_000 });
      expect(run.endedReason).toBe("provider_error");
      expect(run.error ?? "").toContain("FLEET_SCRIPTED_MODEL");
    } finally {
      await other.close();
    }
  }, 90_000);
});

describe("FLEET_SCRIPTED_MAX_DELAY_MS", () => {
  let fleet: FleetEnv;
  beforeAll(async () => {
    fleet = await createFleetEnv("scripted_delay", { env: { FLEET_SCRIPTED_MAX_DELAY_MS: "200" } });
  }, 60_000);
  afterAll(() => fleet?.close());

  it("answers 400 naming the step's delayMs above it, and takes one at it", async () => {
    const { client } = await fleet.startApi();
    const refused = await refusal(
      client.createSession({
        agent: { model: { provider: "scripted", steps: [{ text: "a" }, { text: "b", delayMs: 600_000 }] } },
      }),
    );
    expect(refused.status).toBe(400);
    expect(refused.field).toBe("agent.model.steps[1].delayMs");
    expect(refused.message).toContain("FLEET_SCRIPTED_MAX_DELAY_MS");
    await expect(client.createSession({ agent: slowAgent(200) })).resolves.toHaveProperty("id");
  });

  it("a worker holds a stored step's longer delay to it: the run ends in seconds, not 10 min", async () => {
    const other = await createFleetEnv("scripted_delay_stored");
    try {
      const { client } = await other.startApi();
      const { id } = await client.createSession({ agent: slowAgent(600_000) });
      await other.spawnWorker({ FLEET_SCRIPTED_MAX_DELAY_MS: "100" });
      const { runId } = await client.send(id, "go");
      const run = await client.waitForRun(runId, { timeoutMs: 30_000 });
      expect(run.endedReason).toBe("completed");
    } finally {
      await other.close();
    }
  }, 90_000);
});
