/**
 * FLEET_TENANT_MAX_ACTIVE_SESSIONS and automatic resumes (contracts §10, §12), end to end:
 * the in-process API, a real worker and a real sweeper. A session whose runs keep failing
 * waits out its resume backoff between attempts; it is still the tenant's active session
 * then ("automatic resumes are never refused: the session is already counted"), so new
 * sessions cannot take its place and put the tenant over its cap when the resume comes.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetApiError, FleetClient } from "../src/producer/client.js";
import { QUEUES, RunQueues } from "../src/shared/queues.js";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

describe("the active-session cap while a session waits out its resume backoff", () => {
  let fleet: FleetEnv;
  let client: FleetClient;

  beforeAll(async () => {
    fleet = await createFleetEnv("activecapresume", {
      env: {
        FLEET_TENANT_MAX_ACTIVE_SESSIONS: "2",
        SWEEPER_BACKOFF_MS: "8000",
        SWEEP_INTERVAL_MS: "100",
      },
    });
    const key = (await new ApiKeys(fleet.database).create("acme")).key;
    client = new FleetClient({ baseUrl: (await fleet.startApi()).api.url, apiKey: key, maxLimitWaitMs: 0 });
    await fleet.spawnWorker();
    await fleet.spawnSweeper();
  }, 90_000);

  afterAll(async () => {
    await fleet?.close();
  });

  const activeOf = async () => {
    const [row] = await fleet.database.sql<{ n: number }[]>`
      select count(distinct session_id)::int as n from runs where tenant = 'acme' and status <> 'ended'`;
    return row!.n;
  };

  it("counts the session in backoff: a new session that would go past the cap is refused", async () => {
    // Two runs fail (4 attempts each at the connection), the third succeeds.
    const flaky = {
      model: {
        provider: "scripted" as const,
        steps: [{ text: "finally", fault: "connection" as const, faultTimes: 8 }],
      },
    };
    const slow = { model: { provider: "scripted" as const, steps: [{ text: "slow", delayMs: 10_000 }] } };
    const { id } = await client.createSession({ agent: flaky });
    await client.send(id, "go");
    // The first run and the first automatic resume have failed; the next resume waits out its backoff.
    await waitFor(
      async () => {
        const runs = (await client.getSession(id)).runs;
        return (
          runs.filter((r) => r.status === "ended").length === 2 && runs.every((r) => r.status !== "running")
        );
      },
      30_000,
      "two failed runs",
    );
    await new Promise((resolve) => setTimeout(resolve, 500));
    const accepted: string[] = [];
    let refused = 0;
    for (let i = 0; i < 2; i++) {
      const { id: other } = await client.createSession({ agent: slow });
      try {
        await client.send(other, `other ${i}`);
        accepted.push(other);
      } catch (error) {
        expect(error).toBeInstanceOf(FleetApiError);
        expect((error as FleetApiError).status).toBe(429);
        refused++;
      }
    }
    // The flaky session is one of the tenant's two: one more fits, the second is refused.
    expect({ accepted: accepted.length, refused }).toEqual({ accepted: 1, refused: 1 });
    // The backoff is 8 s so that the two sends above fall inside it on a loaded machine; the
    // rest of it is not waited out (it was, ~7 s): its resume's delayed job is made due now,
    // as the backoff's end makes it, while the accepted session's 10 s model call still runs.
    const waiting = (await client.getSession(id)).runs.filter((r) => r.status === "queued");
    expect(waiting).toHaveLength(1);
    const queues = new RunQueues(fleet.redis, fleet.config.prefix);
    try {
      const job = await queues.resumes.getJob(QUEUES.resumes.jobId({ sessionId: id, runId: waiting[0]!.id }));
      expect(await job?.getState()).toBe("delayed");
      await job!.promote();
    } finally {
      await queues.close();
    }
    // And the tenant never goes past its cap while the flaky session resumes and completes.
    let peak = 0;
    await waitFor(
      async () => {
        peak = Math.max(peak, await activeOf());
        return (await client.getSession(id)).runs.some((r) => r.endedReason === "completed");
      },
      40_000,
      "the flaky session completes",
    );
    expect(peak).toBeLessThanOrEqual(2);
  }, 90_000);
});
