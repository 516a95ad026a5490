/**
 * A 429 storm on a declared endpoint (contracts §15: a session waiting for capacity is not
 * failing — the wait counts against no attempt limit and parks nothing), end to end: the
 * in-process API, a real `fleet worker`, a `fleet sweeper` and a local OpenAI-compatible
 * server that answers every request `429 retry-after: 0` for a while. Short retry-afters let
 * the gate ask again within the worker; past the free asks of one call (MAX_RATE_LIMITED)
 * the job is handed back, rather than the 429s counting as failed attempts that end the run
 * and, resume after resume, park the session `attempts_exhausted`.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetClient } from "../src/producer/client.js";
import { MAX_RATE_LIMITED } from "../src/worker/call-model.js";
import { type FakeOpenAI, startFakeOpenAI } from "./support/fake-openai.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

describe("a provider answering 429 again and again", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let storm: FakeOpenAI;
  let refusing = true;

  beforeAll(async () => {
    storm = await startFakeOpenAI([], {
      respond: () =>
        refusing
          ? {
              status: 429,
              headers: { "retry-after": "0" },
              errorMessage: "rate limit reached",
              errorType: "rate_limit_error",
              errorCode: "rate_limit_exceeded",
            }
          : { text: ["done"] },
    });
    fleet = await createFleetEnv("ratestorm", {
      env: {
        FLEET_MODEL_ENDPOINTS: JSON.stringify({
          storm: { provider: "openai", baseUrl: storm.url, limits: { requestsPerMinute: 60_000 } },
        }),
        SWEEPER_MAX_ATTEMPTS: "2",
        SWEEPER_BACKOFF_MS: "100",
        SWEEP_INTERVAL_MS: "100",
      },
    });
    client = new FleetClient({ baseUrl: (await fleet.startApi()).api.url });
    await fleet.spawnWorker();
    await fleet.spawnSweeper();
  }, 90_000);

  afterAll(async () => {
    await fleet?.close();
    await storm?.close();
  });

  it("keeps the session waiting, nothing ended, counted or parked, and completes it when the provider recovers", async () => {
    const agent = {
      model: { provider: "openai" as const, endpoint: "storm", model: "gpt-test" },
      budget: { maxModelCalls: 3 },
    };
    const { id } = await client.createSession({ agent });
    const { runId } = await client.send(id, "go");
    // Many times the free asks of one call: enough for several runs' attempts to be spent.
    await waitFor(() => storm.requests.length > 4 * MAX_RATE_LIMITED, 30_000, "the storm goes on");
    const waiting = await client.getSession(id);
    expect(waiting.status).not.toBe("parked");
    expect(waiting.runs.map((r) => [r.id, r.status, r.endedReason])).toEqual([
      [runId, expect.any(String), null],
    ]);
    const [row] = await fleet.database.sql<{ resume_attempts: number; model_calls: number }[]>`
      select resume_attempts, model_calls from sessions where id = ${id}`;
    // No attempt counted; the budget holds at most the request in flight (a handed-back
    // run gives its reservation back).
    expect(row!.resume_attempts).toBe(0);
    expect(row!.model_calls).toBeLessThanOrEqual(1);
    refusing = false;
    const run = await client.waitForRun(runId, { timeoutMs: 30_000 });
    expect(run.endedReason).toBe("completed");
    expect((run.usage as { handBacks?: number }).handBacks).toBeGreaterThan(0);
    expect((await client.getSession(id)).runs).toHaveLength(1);
    const [after] = await fleet.database.sql<{ model_calls: number }[]>`
      select model_calls from sessions where id = ${id}`;
    expect(after!.model_calls).toBe(1);
  }, 90_000);
});
