/**
 * Provider limits across the fleet (contracts §15), end to end: the in-process API, two real
 * `fleet worker` processes, a `fleet sweeper`, and local OpenAI-compatible servers, one of
 * which enforces a rate limit of its own and answers `429 retry-after: 2` beyond it
 * (test/support/fake-openai.ts). Sessions make two model calls each (a tool call, then an
 * answer). The limits are declared on endpoints in FLEET_MODEL_ENDPOINTS.
 *
 * The declared rate is checked on the arrivals the server stamped, against the earliest
 * each could have come (`aheadOfRate`: the k-th no sooner than k slots — 500 ms, or 250 ms at
 * `paced` — after the first run was created), not by counting arrivals in a sliding 10 s
 * window: the workers send at their slots, but on a loaded machine a request can be stamped
 * hundreds of ms late (measured: slots exactly 500 ms apart, sent up to 0.9 s late, stamped
 * up to 0.7 s later still by this busy process) next to on-time ones, 22 or 24 to a window
 * that held 20 slots — and a server that refused past 22 per 10 s then answered 429s the
 * fleet had not earned.
 */
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetClient } from "../src/producer/client.js";
import { ProviderLimits } from "../src/shared/provider-limits.js";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import {
  aheadOfRate,
  type FakeOpenAI,
  peakPerWindow,
  startFakeOpenAI,
  twoCallResponder,
} from "./support/fake-openai.js";
import { createFleetEnv, type FleetEnv, type WorkerProcess, waitFor } from "./support/fleet-env.js";

describe("provider limits across two worker processes", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let bigClient: FleetClient;
  let smallClient: FleetClient;
  let sweeper: WorkerProcess;
  const workers: WorkerProcess[] = [];
  /** 120 requests/min declared (a slot every 500 ms). */
  let limited: FakeOpenAI;
  /**
   * 240 requests/min declared (a slot every 250 ms), for the tenant shares' batch of 42
   * requests: what that case checks (no request ahead of its slot, the small tenant's calls
   * going through while most of the batch waits) does not depend on how long the slots are,
   * and at `limited`'s 500 ms it took 21 s, now 11 s. (The first case keeps 500 ms: with
   * 250 ms slots, on a loaded machine its requests came so late that none had to wait past
   * maxWait, and the hand-back it checks did not always happen.)
   */
  let paced: FakeOpenAI;
  /** No limits declared; the server takes 4 per 3 s, then answers 429 retry-after: 2. */
  let bursty: FakeOpenAI;
  /** maxConcurrent 1; its first answer hangs while `hang` is set. */
  let slow: FakeOpenAI;
  let hang = true;

  beforeAll(async () => {
    limited = await startFakeOpenAI([], { respond: twoCallResponder });
    paced = await startFakeOpenAI([], { respond: twoCallResponder });
    bursty = await startFakeOpenAI([], {
      respond: twoCallResponder,
      rateLimit: { requests: 4, windowMs: 3_000 },
    });
    slow = await startFakeOpenAI([], {
      respond: (body) => (hang ? { ...twoCallResponder(body), delayMs: 60_000 } : twoCallResponder(body)),
    });
    fleet = await createFleetEnv("providerlimits", {
      env: {
        FLEET_MODEL_ENDPOINTS: JSON.stringify({
          limited: { provider: "openai", baseUrl: limited.url, limits: { requestsPerMinute: 120 } },
          paced: { provider: "openai", baseUrl: paced.url, limits: { requestsPerMinute: 240 } },
          bursty: { provider: "openai", baseUrl: bursty.url },
          slow: { provider: "openai", baseUrl: slow.url, limits: { maxConcurrent: 1 } },
        }),
        FLEET_TENANT_SHARES: JSON.stringify({ big: 1, small: 1 }),
        FLEET_ENDPOINT_MAX_WAIT_MS: "1000",
        FLEET_ENDPOINT_PERMIT_TTL_MS: "2000",
        WORKER_CONCURRENCY: "4",
        SWEEP_INTERVAL_MS: "200",
        // Not the fleet tests' 2 s: these tests hold provider limits, and a worker slowed past
        // a 2 s lease on a loaded machine had its run ended `stalled` and resumed (a CI-like
        // load, 7 December), which the first test rightly counts against "no resume".
        LEASE_TTL_MS: "6000",
      },
    });
    const keys = new ApiKeys(fleet.database);
    const defaultKey = await keys.create("default");
    const bigKey = await keys.create("big");
    const smallKey = await keys.create("small");
    const { api } = await fleet.startApi();
    client = new FleetClient({ baseUrl: api.url, apiKey: defaultKey.key });
    bigClient = new FleetClient({ baseUrl: api.url, apiKey: bigKey.key });
    smallClient = new FleetClient({ baseUrl: api.url, apiKey: smallKey.key });
    workers.push(await fleet.spawnWorker(), await fleet.spawnWorker());
    sweeper = await fleet.spawnSweeper();
  }, 90_000);

  afterAll(async () => {
    hang = false;
    await fleet?.close();
    for (const fake of [limited, paced, bursty, slow]) await fake?.close();
  });

  const agent = (endpoint: string) => ({
    model: { provider: "openai" as const, endpoint, model: "gpt-test" },
    tools: ["sleep"],
  });

  async function startSessions(c: FleetClient, endpoint: string, n: number) {
    return Promise.all(
      Array.from({ length: n }, async () => {
        const { id } = await c.createSession({ agent: agent(endpoint) });
        const { runId } = await c.send(id, "go");
        return { id, runId };
      }),
    );
  }

  /** What the database says of these sessions: every run, and the sessions' counters. */
  async function stateOf(ids: string[]) {
    const runs = await fleet.database.sql<
      {
        session_id: string;
        kind: string;
        status: string;
        ended_reason: string | null;
        usage: Record<string, number> | null;
      }[]
    >`select session_id, kind, status, ended_reason, usage from runs where session_id in ${fleet.database.sql(ids)}`;
    const sessions = await fleet.database.sql<
      { status: string; resume_attempts: number; model_calls: number }[]
    >`
      select status, resume_attempts, model_calls from sessions where id in ${fleet.database.sql(ids)}`;
    return { runs, sessions };
  }

  /**
   * When the first run of these sessions was created (on Postgres's clock, this machine's):
   * its job was queued after, so no slot for their requests comes sooner. (Not `started_at`:
   * a handed-back run's is set again each time it goes on.)
   */
  async function firstCreated(ids: string[]): Promise<number> {
    const [row] = await fleet.database.sql<{ first: number }[]>`
      select (extract(epoch from min(created_at)) * 1000)::float8 as first
        from runs where session_id in ${fleet.database.sql(ids)}`;
    return Math.floor(row!.first);
  }

  /**
   * A declared rate (a slot every `intervalMs`) held by these arrivals at `endpoint`, from the
   * first run's creation.
   */
  async function expectDeclaredRate(endpoint: string, intervalMs: number, arrivals: number[], ids: string[]) {
    // 5 ms for clocks read in whole ms and timers that may fire a ms early.
    const rate = aheadOfRate(arrivals, (await firstCreated(ids)) - 5, intervalMs);
    expect(rate.early).toEqual([]);
    console.log(
      `${endpoint}: ${arrivals.length} requests, none ahead of the declared rate (least margin ${rate.marginMs} ms); ` +
        `${peakPerWindow(arrivals, 10_000)} stamped within the busiest 10 s`,
    );
  }

  it("holds the declared rate fleet-wide; waiting sessions are handed back and complete, never parked or counted", async () => {
    // 8 sessions, 16 requests: 8 s of slots, where only 2 fit within maxWait (1 s) of now,
    // so most requests are handed back, and the last first call waits ~3.5 s.
    const started = await startSessions(client, "limited", 8);
    for (const { runId } of started) {
      const run = await client.waitForRun(runId, { timeoutMs: 60_000 });
      expect(run.endedReason).toBe("completed");
    }
    const { runs, sessions } = await stateOf(started.map((s) => s.id));
    // One run per session, completed: no resume, no retry, no parking.
    expect(runs).toHaveLength(8);
    for (const run of runs)
      expect(run).toMatchObject({ kind: "run", status: "ended", ended_reason: "completed" });
    for (const session of sessions) expect(session).toMatchObject({ status: "active", resume_attempts: 0 });
    // 16 requests at 2 a second: none reached the server sooner than the declared rate allows.
    expect(limited.stats.accepted).toHaveLength(16);
    await expectDeclaredRate(
      "limited",
      500,
      limited.stats.accepted,
      started.map((s) => s.id),
    );
    // The waits are on the runs: some runs were handed back and came back to finish.
    const waited = runs.map((r) => r.usage?.waitedMs ?? -1);
    expect(Math.min(...waited)).toBeGreaterThanOrEqual(0);
    expect(Math.max(...waited)).toBeGreaterThan(2_000);
    expect(runs.some((r) => (r.usage?.handBacks ?? 0) > 0)).toBe(true);
    for (const run of runs) expect(run.usage).toMatchObject({ inputTokens: 22, outputTokens: 14 });
    // No job failed or was retried by the queue: every one completed on its first attempt.
    const jobs = await fleet.redis.keys(`${fleet.env.FLEET_PREFIX}:runs:run-*`);
    const attempts = await Promise.all(jobs.map((k) => fleet.redis.hget(k, "atm")));
    expect(attempts.filter((a) => a !== null && a !== "0" && a !== "1")).toEqual([]);
    expect(sweeper.output()).not.toMatch(/session parked|run abandoned/);
  }, 90_000);

  it("a 429 pauses the endpoint for every worker for the time it asks", async () => {
    // When each pause was recorded, on Redis's clock (this machine's): the pause's end less
    // the 2 s asked for. Read from the value itself, not stamped by this busy process; a value
    // replaced before it was read only makes the check below start later.
    const pauses = new Set<number>();
    const pauseKey = `${fleet.env.FLEET_PREFIX}:endpoint-limits:{bursty}`;
    let polling = true;
    const poll = (async () => {
      while (polling) {
        const until = await fleet.redis.hget(pauseKey, "pause");
        if (until !== null) pauses.add(Number(until));
        await new Promise((r) => setTimeout(r, 10));
      }
    })();
    // 6 sessions: their 6 first calls at once are 2 more than the server takes in 3 s.
    const started = await startSessions(client, "bursty", 6);
    for (const { runId } of started) {
      const run = await client.waitForRun(runId, { timeoutMs: 60_000 }).catch(async (error) => {
        polling = false;
        await poll;
        throw error;
      });
      expect(run.endedReason).toBe("completed");
    }
    polling = false;
    await poll;
    const { rateLimited, accepted } = bursty.stats;
    expect(accepted).toHaveLength(12);
    expect(rateLimited.length).toBeGreaterThan(0);
    // After each 429 (retry-after: 2), once the pause is recorded no worker starts a request
    // to the endpoint until it ends: each request is checked again right before it leaves. What
    // reaches the server within the pause left before it was recorded: the allowance is for
    // such a request's way to the server (measured at load 12-22: up to ~290 ms from the
    // record; from a cold worker, 2 s from its check). Not measured from the 429 itself: the
    // worker that got it records the pause only once its loop takes the answer (measured: up
    // to 960 ms later at load 24), and until then nobody can know.
    const all = [...accepted, ...rateLimited].sort((a, b) => a - b);
    const known = [...pauses].map((until) => ({ recorded: until - 2_000, until }));
    expect(known.length).toBeGreaterThan(0);
    const late = known.flatMap(({ recorded, until }) =>
      all.filter((x) => x > recorded && x < until - 5).map((x) => x - recorded),
    );
    console.log(
      `bursty: ${accepted.length} accepted, ${rateLimited.length} answered 429, ${known.length} pauses seen recorded; ` +
        `${late.length} arrivals within a pause after its record, the latest ${Math.max(0, ...late)} ms after it`,
    );
    for (const { recorded, until } of known)
      expect(all.filter((x) => x > recorded + 500 && x < until - 5)).toEqual([]);
    const { runs, sessions } = await stateOf(started.map((s) => s.id));
    expect(runs.map((r) => r.ended_reason)).toEqual(Array(6).fill("completed"));
    for (const session of sessions) expect(session.resume_attempts).toBe(0);
  }, 90_000);

  it("tenant shares: a small tenant's session waits about the gate's wait behind a big tenant's batch", async () => {
    const limits = new ProviderLimits(fleet.redis as Redis, fleet.env.FLEET_PREFIX!);
    const batch = await startSessions(bigClient, "paced", 20);
    // The batch fills the calendar (~10 s of work): every worker slot holds one of its runs,
    // and its requests count as waiting for the endpoint (once, this was a fixed 3 s).
    await waitFor(
      async () => ((await limits.waiting("paced")).get("big") ?? 0) >= 8,
      // A state waited for, not a time: at load 20 (a 2,094 s suite) the two workers took their
      // first jobs later than 20 s after the batch was sent.
      45_000,
      "the big batch waiting for the endpoint",
    );
    const [small] = await startSessions(smallClient, "paced", 1);
    const run = await smallClient.waitForRun(small!.runId, { timeoutMs: 60_000 });
    expect(run.endedReason).toBe("completed");
    const pending = await fleet.database.sql<{ n: number }[]>`
      select count(*)::int as n from runs where session_id in ${fleet.database.sql(batch.map((b) => b.id))} and status <> 'ended'`;
    // The small tenant's two calls went through while most of the big batch still waited.
    expect(pending[0]!.n).toBeGreaterThan(8);
    for (const { runId } of batch)
      expect((await bigClient.waitForRun(runId, { timeoutMs: 90_000 })).endedReason).toBe("completed");
    const arrivals = paced.stats.accepted;
    expect(arrivals).toHaveLength(42);
    await expectDeclaredRate(
      "paced",
      250,
      arrivals,
      [...batch, small!].map((s) => s.id),
    );
  }, 150_000);

  it("a SIGKILLed worker's concurrency permit expires; the endpoint is usable again", async () => {
    const limits = new ProviderLimits(fleet.redis as Redis, fleet.env.FLEET_PREFIX!);
    const [first] = await startSessions(client, "slow", 1);
    await waitFor(async () => slow.stats.inFlight === 1, 20_000, "the first request hangs");
    expect(await limits.inUse("slow")).toBe(1);
    const [holder] = await fleet.database.sql<{ worker_id: string }[]>`
      select worker_id from runs where session_id = ${first!.id} and status = 'running'`;
    const pid = Number(holder!.worker_id.split("-").at(-2));
    const victim = workers.find((w) => w.child.pid === pid)!;
    expect(victim).toBeDefined();
    victim.child.kill("SIGKILL");
    await victim.exited;
    hang = false;
    // Its permit expires (FLEET_ENDPOINT_PERMIT_TTL_MS = 2 s) although nobody released it.
    await waitFor(
      async () => (await limits.inUse("slow")) === 0 || slow.stats.accepted.length > 1,
      6_000,
      "permit freed",
    );
    const [second] = await startSessions(client, "slow", 1);
    expect((await client.waitForRun(second!.runId, { timeoutMs: 30_000 })).endedReason).toBe("completed");
  }, 90_000);
});
