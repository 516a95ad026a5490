import { resolve } from "node:path";
import { Queue } from "bullmq";
import { Redis } from "ioredis";
import postgres from "postgres";
import { startApi } from "../src/producer/api-server.js";
import { FleetClient } from "../src/producer/client.js";
import { startSweeper } from "../src/sweeper/sweeper-process.js";
import { type BacklogOptions, type BacklogSample, backlogKills } from "./recovery-backlog.js";
import {
  benchOptions,
  Cleanup,
  deleteRedisPrefix,
  fmt,
  median,
  percentile,
  REDIS_URL,
  type ReadyChild,
  ROOT,
  scratchFleet,
  shortId,
  sleep,
  sleeperStartsKey,
  spawnFleetWorker,
  spawnUntilReady,
  stopChild,
  table,
  waitUntil,
  wholeNumber,
} from "./support.js";

const values = benchOptions({
  kills: { type: "string", default: "20" },
  "sessions-per-kill": { type: "string", default: "4" },
  workers: { type: "string", default: "2" },
  concurrency: { type: "string", default: "32" },
  "sleep-ms": { type: "string", default: "30000" },
  "baseline-rounds": { type: "string", default: "2" },
  "baseline-jobs": { type: "string", default: "4" },
  "tuned-rounds": { type: "string", default: "10" },
  "backlog-kills": { type: "string", default: "3" },
  "backlog-factor": { type: "string", default: "10" },
  "backlog-sleep-ms": { type: "string", default: "1000" },
});

const KILLS = wholeNumber("kills", values.kills, 1);
const PER_KILL = wholeNumber("sessions-per-kill", values["sessions-per-kill"], 1);
const WORKERS = wholeNumber("workers", values.workers, 2);
const CONCURRENCY = wholeNumber("concurrency", values.concurrency, 1);
const SLEEP_MS = wholeNumber("sleep-ms", values["sleep-ms"], 1_000);
const BASELINE_ROUNDS = wholeNumber("baseline-rounds", values["baseline-rounds"], 0);
const BASELINE_JOBS = wholeNumber("baseline-jobs", values["baseline-jobs"], 1);
const TUNED_ROUNDS = wholeNumber("tuned-rounds", values["tuned-rounds"], 0);
/** The tuned baseline: BullMQ's lock and stalled-check intervals at 5 s instead of 30 s. */
const TUNED = { lockMs: 5_000, stalledMs: 5_000 };
/** Tuned rounds run this many at a time (each is two node processes). */
const TUNED_AT_ONCE = 4;
const BACKLOG: BacklogOptions = {
  kills: wholeNumber("backlog-kills", values["backlog-kills"], 0),
  factor: wholeNumber("backlog-factor", values["backlog-factor"], 1),
  sleepMs: wholeNumber("backlog-sleep-ms", values["backlog-sleep-ms"], 0),
};
/** BullMQ's default stalledInterval: the baseline's kill offsets are spread over one of them. */
const BULLMQ_STALLED_INTERVAL_MS = 30_000;
/** The first baseline round kills A this long after A was up (B is up by then). */
const BASELINE_FIRST_KILL_MS = 3_000;

type KillSample = { kill: number; victimSessions: number; latencies: number[] };

// ── baseline: BullMQ stalled-job recovery ───────────────────────────────────────────────

/** `result` never rejects: a failed round resolves to its error. */
type BaselineRound = {
  round: number;
  offsetMs: number;
  /** When A was up, every job was running on A, B was up, A was killed (ms after A was up). */
  timeline: { jobsRunning: number; bReady: number; killed: number };
  result: Promise<number[] | Error>;
};

/**
 * Starts one baseline round and returns at once with a promise of its latencies (ms from
 * the kill of A to B's processor start, one per job).
 */
async function startBaselineRound(
  round: number,
  offsetMs: number,
  cleanup: Cleanup,
  redis: Redis,
  tuned?: { lockMs: number; stalledMs: number },
) {
  const prefix = `bench-rb-${shortId()}`;
  cleanup.add(`delete Redis keys ${prefix}:*`, () => deleteRedisPrefix(redis, prefix));
  const queueName = "sleepers";
  const sleeperFile = resolve(ROOT, "bench/bullmq-sleeper.ts");
  const env = (role: string) => ({
    SLEEPER_REDIS_URL: REDIS_URL,
    SLEEPER_PREFIX: prefix,
    SLEEPER_QUEUE: queueName,
    SLEEPER_ROLE: role,
    SLEEPER_CONCURRENCY: String(BASELINE_JOBS),
    ...(tuned ? { SLEEPER_LOCK_MS: String(tuned.lockMs), SLEEPER_STALLED_MS: String(tuned.stalledMs) } : {}),
  });
  const spawnSleeper = async (role: string) => {
    const child = await spawnUntilReady(["--import", "tsx", sleeperFile], env(role), /bullmq sleeper ready/);
    cleanup.add(`stop sleeper ${role} of round ${round}`, () => stopChild(child));
    return child;
  };
  const starts = async () =>
    (await redis.lrange(sleeperStartsKey(prefix), 0, -1)).map(
      (entry) => JSON.parse(entry) as { jobId: string; role: string; at: number },
    );

  const victim = await spawnSleeper("A");
  const aReady = Date.now();
  const timeline = { jobsRunning: 0, bReady: 0, killed: 0 };
  const queueRedis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
  const queue = new Queue(queueName, { connection: queueRedis, prefix });
  cleanup.add(`close the queue of round ${round}`, async () => {
    await queue.close();
    await queueRedis.quit();
  });
  for (let i = 0; i < BASELINE_JOBS; i++) await queue.add("sleep", { i }, { jobId: `job-${i}` });
  await waitUntil(
    async () => (await starts()).filter((s) => s.role === "A").length === BASELINE_JOBS,
    20_000,
    `baseline round ${round}: every job running on worker A`,
  );
  // B starts only now, so that every job is on A; A is killed `offsetMs` after A was up
  // (or as soon as B is up, if that is later).
  timeline.jobsRunning = Date.now() - aReady;
  const rescuer = await spawnSleeper("B");
  timeline.bReady = Date.now() - aReady;
  const result = (async () => {
    await sleep(Math.max(0, aReady + offsetMs - Date.now()));
    const killedAt = Date.now();
    timeline.killed = killedAt - aReady;
    await stopChild(victim);
    // Two stalled checks 30 s apart are needed after A's last lock renewal: ≤ ~60 s.
    await waitUntil(
      async () => (await starts()).filter((s) => s.role === "B").length >= BASELINE_JOBS,
      100_000,
      `baseline round ${round}: every job picked up again by worker B`,
      100,
    );
    // BullMQ errors B reported (its stalled checks among them), if any.
    const errors = rescuer
      .output()
      .split("\n")
      .filter((line) => line.startsWith("sleeper B:"));
    if (errors.length > 0) console.log(`  baseline round ${round}: ${errors.join("; ")}`);
    return (await starts()).filter((s) => s.role === "B").map((s) => s.at - killedAt);
  })().catch((error: Error) => error);
  return { round, offsetMs, timeline, result } satisfies BaselineRound;
}

// ── fleet: the sweeper's resume after SIGKILL ──────────────────────────────────────────

async function runFleet(
  cleanup: Cleanup,
  redis: Redis,
): Promise<{ samples: KillSample[]; backlog: BacklogSample[] }> {
  const { databaseUrl, env, config } = await scratchFleet(cleanup, redis, "rec", CONCURRENCY);
  console.log(
    `fleet: sweeper every ${config.sweepIntervalMs} ms, lease ttl ${config.leaseTtlMs} ms, ` +
      `${WORKERS} workers × concurrency ${CONCURRENCY}; ${PER_KILL} sessions per kill, each in sleep(${SLEEP_MS} ms)`,
  );
  const api = await startApi(config, { port: 0 });
  cleanup.add("stop the API", () => api.stop());
  const sweeper = await startSweeper(config, { serveMetrics: false });
  cleanup.add("stop the sweeper", () => sweeper.stop());
  const client = new FleetClient({ baseUrl: api.url });
  const sql = postgres(databaseUrl, { max: 2, onnotice: () => {} });
  cleanup.add("close the poller", () => sql.end({ timeout: 5 }));

  const alive = new Map<string, ReadyChild>();
  const everyWorker: ReadyChild[] = [];
  cleanup.add("kill fleet workers", () => Promise.all(everyWorker.map((w) => stopChild(w))));
  const startWorker = async () => {
    const worker = await spawnFleetWorker(env);
    everyWorker.push(worker);
    alive.set(worker.workerId, worker);
  };
  await Promise.all(Array.from({ length: WORKERS }, startWorker));

  const agent = {
    model: {
      provider: "scripted" as const,
      steps: [
        { toolCalls: [{ id: "nap", name: "sleep", arguments: { ms: SLEEP_MS } }] },
        { text: "Woke up, done." },
      ],
    },
    tools: ["sleep"],
  };

  const samples: KillSample[] = [];
  for (let kill = 1; kill <= KILLS; kill++) {
    const ids = await Promise.all(
      Array.from({ length: PER_KILL }, async (_, i) => {
        const { id: sessionId } = await client.createSession({ agent, metadata: { kill, i } });
        await client.send(sessionId, `Kill ${kill}, session ${i}: take a nap.`);
        return sessionId;
      }),
    );
    // Inside the tool: the call is stored, its result is not, and the run is running on a worker.
    let inside: { session_id: string; worker_id: string }[] = [];
    await waitUntil(
      async () => {
        inside = await sql<{ session_id: string; worker_id: string }[]>`
          select r.session_id, r.worker_id from runs r
           where r.session_id = any(${ids}) and r.kind = 'run' and r.status = 'running'
             and r.worker_id is not null
             and exists (select 1 from messages m where m.session_id = r.session_id
                          and m.role = 'assistant' and m.tool_calls is not null)
             and not exists (select 1 from messages m where m.session_id = r.session_id and m.role = 'tool')`;
        return inside.length === PER_KILL;
      },
      20_000,
      `kill ${kill}: all sessions inside the sleep tool`,
      20,
    );
    const byWorker = new Map<string, string[]>();
    for (const row of inside)
      byWorker.set(row.worker_id, [...(byWorker.get(row.worker_id) ?? []), row.session_id]);
    const [victimId, victimSessions] = [...byWorker.entries()].sort((a, b) => b[1].length - a[1].length)[0]!;
    const victim = alive.get(victimId);
    if (!victim)
      throw new Error(`kill ${kill}: sessions run on ${victimId}, which is not a live worker here`);

    const killedAt = Date.now();
    victim.child.kill("SIGKILL");
    alive.delete(victimId);
    let resumes: { session_id: string; trigger: string; started_ms: number }[] = [];
    await waitUntil(
      async () => {
        resumes = await sql<{ session_id: string; trigger: string; started_ms: number }[]>`
          select session_id, trigger, (extract(epoch from started_at) * 1000)::float8 as started_ms from runs
           where session_id = any(${victimSessions}) and kind = 'resume' and started_at is not null`;
        return resumes.length === victimSessions.length;
      },
      30_000,
      `kill ${kill}: the resume of every session of the killed worker started`,
      10,
    );
    const notBySweeper = resumes.filter((r) => r.trigger !== "sweeper");
    if (notBySweeper.length > 0) {
      throw new Error(`kill ${kill}: resumes not triggered by the sweeper: ${JSON.stringify(notBySweeper)}`);
    }
    const latencies = resumes.map((r) => r.started_ms - killedAt).sort((a, b) => a - b);
    samples.push({ kill, victimSessions: victimSessions.length, latencies });
    console.log(
      `  kill ${String(kill).padStart(2)}: ${victimSessions.length} of ${PER_KILL} sessions on the killed worker; ` +
        `resume started after ${latencies.map((l) => fmt(l, 0)).join(", ")} ms`,
    );

    await victim.exited;
    await startWorker();
    // The resumed sessions finish on the survivors: one interrupted result, then the answer.
    await waitUntil(
      async () => {
        const [row] = await sql<{ n: number }[]>`
          select count(*)::int as n from sessions where id = any(${victimSessions}) and tail_state = 'completed'`;
        return row!.n === victimSessions.length;
      },
      20_000,
      `kill ${kill}: the resumed sessions completed`,
    );
  }

  // Resumes while a backlog of first runs waits in the queue.
  let backlog: BacklogSample[] = [];
  if (BACKLOG.kills > 0) {
    const queue = new Queue("runs", { connection: redis, prefix: env.FLEET_PREFIX });
    cleanup.add("close the backlog queue handle", () => queue.close());
    backlog = await backlogKills(
      {
        client,
        sql,
        queue,
        alive,
        startWorker,
        sleepyAgent: agent,
        perKill: PER_KILL,
        totalConcurrency: WORKERS * CONCURRENCY,
      },
      BACKLOG,
    );
  }

  // Every resumed sleepy session: its one tool call answered exactly once, as interrupted.
  const [check] = await sql<{ bad: number }[]>`
    select count(*)::int as bad from sessions s
     where s.metadata ? 'kill'
       and exists (select 1 from runs r where r.session_id = s.id and r.kind = 'resume' and r.started_at is not null)
       and (select count(*) from messages m
             where m.session_id = s.id and m.role = 'tool' and m.success = false) <> 1`;
  if (check!.bad > 0)
    throw new Error(`${check!.bad} resumed sessions do not have exactly one interrupted result`);
  return { samples, backlog };
}

function statsRow(label: string, samples: number[], withP99 = true): string[] {
  return [
    label,
    String(samples.length),
    fmt(percentile(samples, 50), 0),
    withP99 ? fmt(percentile(samples, 99), 0) : "",
    fmt(Math.max(...samples), 0),
  ];
}

async function main(): Promise<number> {
  const began = Date.now();
  console.log(
    `recovery: ${KILLS} kills of a fleet worker mid-tool; baseline: ${BASELINE_ROUNDS} rounds × ` +
      `${BASELINE_JOBS} BullMQ jobs, worker killed with default lock and stalled-check settings, ` +
      `and ${TUNED_ROUNDS} rounds with them tuned to 5 s / 5 s`,
  );
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
  const cleanup = new Cleanup();
  cleanup.add("close Redis", () => redis.quit());
  let failed = false;
  try {
    // The baseline first: its rounds then wait out BullMQ's 30-s timers while the fleet part runs.
    const rounds = await Promise.all(
      Array.from({ length: BASELINE_ROUNDS }, (_, r) =>
        startBaselineRound(
          r + 1,
          BASELINE_FIRST_KILL_MS + Math.round((r * BULLMQ_STALLED_INTERVAL_MS) / BASELINE_ROUNDS),
          cleanup,
          redis,
        ),
      ),
    );
    const { samples, backlog } = await runFleet(cleanup, redis);
    console.log("  fleet kills done; BullMQ tuned to 5 s / 5 s next");
    // The tuned baseline, a few rounds at a time, kills spread over one stalled interval.
    const tuned: number[] = [];
    for (let first = 0; first < TUNED_ROUNDS; first += TUNED_AT_ONCE) {
      const group = await Promise.all(
        Array.from({ length: Math.min(TUNED_AT_ONCE, TUNED_ROUNDS - first) }, (_, k) =>
          startBaselineRound(
            100 + first + k,
            BASELINE_FIRST_KILL_MS + Math.round(((first + k) * TUNED.stalledMs) / Math.max(1, TUNED_ROUNDS)),
            cleanup,
            redis,
            TUNED,
          ),
        ),
      );
      for (const round of group) {
        const latencies = await round.result;
        if (latencies instanceof Error) throw latencies;
        tuned.push(...latencies);
      }
    }
    console.log("  waiting for BullMQ's default stalled-job checks");
    const baseline: number[] = [];
    for (const round of rounds) {
      const latencies = await round.result;
      if (latencies instanceof Error) throw latencies;
      baseline.push(...latencies);
      const t = round.timeline;
      console.log(
        `  baseline round ${round.round}: after A was up, its jobs ran at ${fmt(t.jobsRunning / 1000, 1)} s, ` +
          `B was up at ${fmt(t.bReady / 1000, 1)} s, A was killed at ${fmt(t.killed / 1000, 1)} s; ` +
          `B picked the jobs up ${latencies.map((l) => fmt(l / 1000, 1)).join(", ")} s after the kill`,
      );
    }

    const perKillMedian = samples.map((s) => median(s.latencies));
    const perKillFirst = samples.map((s) => s.latencies[0]!);
    const everySession = samples.flatMap((s) => s.latencies);
    console.log("");
    console.log(
      "kill → resume start, ms (percentiles by nearest rank, so with fewer than 100 samples p99 is the largest)",
    );
    const rows = [["", "samples", "p50", "p99", "max"]];
    rows.push(statsRow("fleet sweeper, median per kill (the sample)", perKillMedian));
    rows.push(statsRow("fleet sweeper, first session per kill", perKillFirst));
    rows.push(statsRow("fleet sweeper, every session", everySession));
    if (backlog.length > 0) {
      const least = Math.min(...backlog.map((b) => b.queuedAtKill));
      rows.push(
        statsRow(
          `fleet sweeper, every session, ≥ ${least} first runs queued`,
          backlog.flatMap((b) => b.started),
        ),
      );
      rows.push(
        statsRow(
          "  the same sessions, kill → resume enqueued",
          backlog.flatMap((b) => b.enqueued),
        ),
      );
    }
    if (tuned.length > 0) {
      rows.push(statsRow("BullMQ stalled-job recovery, lock 5 s / stalled check 5 s, per job", tuned));
    }
    if (baseline.length > 0) {
      rows.push(statsRow("BullMQ stalled-job recovery (defaults), per job", baseline, false));
    }
    console.log(table(rows));
    if (tuned.length > 0) {
      console.log(
        `ratio BullMQ tuned / fleet: p50 ${fmt(percentile(tuned, 50) / percentile(perKillMedian, 50), 1)}×, ` +
          `p99 ${fmt(percentile(tuned, 99) / percentile(perKillMedian, 99), 1)}×`,
      );
    }
    if (baseline.length > 0) {
      console.log(
        `ratio BullMQ / fleet: p50 ${fmt(percentile(baseline, 50) / percentile(perKillMedian, 50), 0)}×, ` +
          `max ${fmt(Math.max(...baseline) / Math.max(...perKillMedian), 0)}×`,
      );
    }
  } catch (error) {
    failed = true;
    console.error(`recovery bench failed: ${(error as Error).message}`);
  } finally {
    await cleanup.run();
  }
  console.log(`total run time: ${fmt((Date.now() - began) / 1000, 1)} s`);
  return failed ? 1 : 0;
}

// Exit explicitly: a keep-alive socket or timer left by a library must not hold the run open.
process.exit(await main());
