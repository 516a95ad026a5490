/**
 * FLEET_TENANT_MAX_ACTIVE_SESSIONS and a session between its run's end and its automatic
 * resume (contracts §10, §12). A run that ends interrupted — its worker dead or frozen (the
 * sweeper ends it, then resumes in a later statement), or its model failing (the worker ends
 * it, the sweeper resumes it on the next tick) — leaves its session with no run queued or
 * running for a moment. The session is still the tenant's: it will be resumed without anyone
 * asking. Counted only by its runs, it left the cap meanwhile, a waiting send took its place,
 * and the resume put the tenant over its cap (test/limits-under-kills.test.ts saw 9 of 8).
 * Crash states made on purpose; real Postgres, Redis and API, the sweeper in this process.
 */
import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetApiError, FleetClient } from "../src/producer/client.js";
import { parseAgentConfig } from "../src/shared/agent-config.js";
import { RunQueues } from "../src/shared/queues.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { sweeperOf, withDeadWorkersRun } from "./support/stalled-run.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

let fleet: FleetEnv;
let client: FleetClient;
let queues: RunQueues;

beforeAll(async () => {
  fleet = await createFleetEnv("active-cap-awaiting-resume", {
    env: { FLEET_TENANT_MAX_ACTIVE_SESSIONS: "1" },
  });
  const { api } = await fleet.startApi();
  client = new FleetClient({ baseUrl: api.url, maxLimitWaitMs: 0 });
  queues = new RunQueues(fleet.redis, fleet.config.prefix);
}, 60_000);
afterAll(async () => {
  await queues?.close();
  await fleet?.close();
});

/** What a send to a new session of the tenant gets: "accepted", or the 429's limit. */
async function sendNew(): Promise<string> {
  const { id } = await client.createSession({ agent: AGENT });
  try {
    await client.send(id, "may I?");
    return "accepted";
  } catch (error) {
    if (error instanceof FleetApiError && error.status === 429) return `429 ${error.limit ?? ""}`.trim();
    throw error;
  }
}

/** Ends every run and drops every session, so that each case starts with the tenant idle. */
async function idle(): Promise<void> {
  const { sql } = fleet.database;
  await sql`update runs set status = 'ended', ended_reason = 'cancelled', ended_at = now() where status <> 'ended'`;
  await sql`update sessions set status = 'cancelled' where status = 'active'`;
}

describe("a session between its interrupted run's end and its automatic resume", () => {
  it("still holds its place under the cap while the sweeper ends its dead worker's run and resumes it", async () => {
    await idle();
    const during: string[] = [];
    const sweeper = sweeperOf(fleet, queues, {
      // Called after the run's end is stored and before the resume is queued: the gap.
      runEnded: async () => void during.push(await sendNew()),
    });
    await withDeadWorkersRun(fleet, async ({ sessionId, runStatus }) => {
      expect(await sweeper.sweepAbandoned()).toBe(0); // first look: missing, not yet dead
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(await sweeper.sweepAbandoned()).toBe(1);
      expect(await runStatus()).toEqual({ status: "ended", ended_reason: "crashed" });
      expect(during).toEqual(["429 active_sessions"]);
      // The resume came, and the session is the tenant's one active session.
      const runs = await fleet.database.sql<{ kind: string; status: string }[]>`
        select kind, status from runs where session_id = ${sessionId} and status <> 'ended'`;
      expect(runs).toEqual([{ kind: "resume", status: "queued" }]);
      expect(await sendNew()).toBe("429 active_sessions");
    });
  });

  it("holds it too after its worker ended the run failed and before the sweeper's resume, and a send to it still fits", async () => {
    await idle();
    // What a worker's end of a run whose model failed leaves (fenced-runs.ts endRun, then
    // reportStop): the run ended `failed`, the history open, nothing queued yet.
    const { id } = await new SessionQueries(fleet.database).createSession({
      agent: parseAgentConfig(AGENT),
      messages: [{ role: "user", content: "question" }],
      tenant: "default",
    });
    await fleet.database.sql`update sessions set run_started = true where id = ${id}`;
    await fleet.database.sql`
      insert into runs (id, session_id, kind, trigger, status, started_at, ended_at, ended_reason)
      values (${randomUUID()}, ${id}, 'run', 'api', 'ended', now(), now(), 'failed')`;
    const [session] = await fleet.database.sql<{ tail_phase: string; status: string; tenant: string }[]>`
      select tail_phase, status, tenant from sessions where id = ${id}`;
    expect(session).toEqual({ tail_phase: "open", status: "active", tenant: "default" });
    expect(await sendNew()).toBe("429 active_sessions");
    // More input for the session itself counts it once: it fits.
    await client.send(id, "and more");
    // Once it has completed, it is no longer the tenant's: a new session fits.
    await fleet.database
      .sql`update runs set status = 'ended', ended_reason = 'completed' where session_id = ${id}`;
    await fleet.database.sql`update sessions set tail_state = 'completed' where id = ${id}`;
    expect(await sendNew()).toBe("accepted");
  });
});
