/**
 * `npm run bench`: sessions per second through the whole fleet, against a minimal
 * hand-written BullMQ + postgres.js baseline doing the same appends, in the same run.
 *
 * Fleet: a scratch database and FLEET_PREFIX, the real HTTP API and a sweeper in this
 * process, W `fleet worker` child processes. Each session runs the zero-latency scripted
 * model: user → assistant tool call (write_file or append_file) → tool result → answer.
 * Sessions are submitted as a backend would: POST /v1/batches of 50 through the
 * FleetClient (`--via http`: create + send per session over HTTP; `--via service`: the
 * FleetService in this process), at most --submitters in flight.
 * Elapsed time: first submit → the last run's ended_at.
 *
 * Baseline: its own scratch database with one `messages` table, W child processes of
 * bench/baseline-worker.ts with the same concurrency; one BullMQ job per session (added
 * with the same number in flight); each job makes the same 4 inserts and the same file
 * write. Elapsed time: first add → the last final answer's created_at.
 *
 * Each phase runs a short warm-up batch first (not counted), and the second phase starts
 * only after the first has been torn down. Besides rates it prints the CPU each part
 * used (Redis: the server at BENCH_REDIS_URL alone) and the Postgres transactions and Redis
 * commands per session, for profiling.
 *
 * Both sides run --rounds times (default 3), alternating which goes first; the report gives
 * min / median / max sessions/s of each side and the ratio of the medians.
 *
 *   npm run bench -- --sessions 500 --workers 2 --concurrency 16 --rounds 3
 */
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { Session } from "node:inspector/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { Queue } from "bullmq";
import { Redis } from "ioredis";
import postgres from "postgres";
import { startApi } from "../src/producer/api-server.js";
import { FleetClient } from "../src/producer/client.js";
import type { FleetConfig } from "../src/shared/config.js";
import { DEFAULT_TENANT } from "../src/shared/store/api-keys.js";
import { startSweeper } from "../src/sweeper/sweeper-process.js";
import { benchAgent, inProcessService } from "./producer.js";
import {
  benchOptions,
  Cleanup,
  CpuWindow,
  createScratchDatabase,
  type DbActivity,
  dbActivity,
  deleteRedisPrefix,
  dropScratchDatabase,
  fmt,
  inPool,
  median,
  oneOf,
  pidsByName,
  REDIS_URL,
  type ReadyChild,
  ROOT,
  redisServerPids,
  scratchFleet,
  shortId,
  sleep,
  spawnFleetWorker,
  spawnUntilReady,
  stopChild,
  table,
  wholeNumber,
} from "./support.js";

const values = benchOptions({
  sessions: { type: "string", default: "500" },
  workers: { type: "string", default: "2" },
  concurrency: { type: "string", default: "16" },
  submitters: { type: "string", default: "32" },
  warmup: { type: "string", default: "20" },
  sweeper: { type: "string", default: "on" },
  /** batch: POST /v1/batches of 50 (how a backend submits); http: create + send per session; service: in-process. */
  via: { type: "string", default: "batch" },
  only: { type: "string", default: "both" },
  /** Measured rounds; each round runs both sides, in alternating order (fleet first, then baseline first, …). */
  rounds: { type: "string", default: "3" },
  /**
   * Write a V8 CPU profile of each worker process (fleet and baseline) into this directory,
   * and one of this process (the driver) over each measured phase.
   */
  profile: { type: "string" },
  /** off: the fleet's sessions are created with `sessionEvents: false` (no per-session event streams). */
  "session-events": { type: "string", default: "on" },
});

const SESSIONS = wholeNumber("sessions", values.sessions, 1);
const WORKERS = wholeNumber("workers", values.workers, 1);
const CONCURRENCY = wholeNumber("concurrency", values.concurrency, 1);
const SUBMITTERS = wholeNumber("submitters", values.submitters, 1);
const WARMUP = wholeNumber("warmup", values.warmup, 0);
const WITH_SWEEPER = oneOf("sweeper", values.sweeper, ["on", "off"]) === "on";
const VIA = oneOf("via", values.via, ["batch", "http", "service"]);
/** Sessions per POST /v1/batches with --via batch. */
const BATCH_SIZE = 50;
const ONLY = oneOf("only", values.only, ["both", "fleet", "baseline"]);
const ROUNDS = wholeNumber("rounds", values.rounds, 1);
const SESSION_EVENTS = oneOf("session-events", values["session-events"], ["on", "off"]) === "on";
/** What each fleet session or batch is created with. */
const EVENTS_OPTION = SESSION_EVENTS ? {} : { sessionEvents: false };
const WORKER_NODE_ARGS = values.profile ? ["--cpu-prof", `--cpu-prof-dir=${resolve(values.profile)}`] : [];

/** A phase that has not finished after this long is reported as failed. */
const PHASE_TIMEOUT_MS = 120_000;
const MESSAGES_PER_SESSION = 4;
/**
 * A backend publishes its statistics at most once a second, and one that published less
 * than a second ago and then went idle waits 10 s (PGSTAT_IDLE_INTERVAL) before it does.
 */
const STATS_SETTLE_MS = 10_500;
const POLL_MS = 50;
const REDIS_COMM = "redis-server";

type PhaseResult = {
  elapsedMs: number;
  submitMs: number;
  note: string;
  cpu: ReturnType<CpuWindow["stop"]>;
  /** Database activity, measured in the first round of each side only (it costs two 10 s settles). */
  db: DbActivity | null;
};

/** What a phase sets up for the common measurement. */
type Phase = {
  sql: postgres.Sql;
  /** The bench's own connection to the Redis the phase uses: whose server's CPU is charged. */
  redis: Redis;
  workers: ReadyChild[];
  driverLabel: string;
  /** Submits sessions `from` … `from + count - 1`. */
  submit: (from: number, count: number) => Promise<unknown>;
  /** True, and the time the last of them finished (ms since epoch), once `total` have finished. */
  progress: (total: number) => Promise<{ done: boolean; count: number; lastEndMs: number | null }>;
  /** Checks the stored result after `total` sessions; returns a one-line verdict. */
  verify: (total: number) => Promise<string>;
};

/**
 * With --profile, this process's CPU profile over the measured part of a phase (after the
 * warm-up), written as `driver-<side>-<epoch ms>.cpuprofile`: the API, sweeper and client's share.
 */
async function driverProfile(name: string): Promise<() => Promise<void>> {
  if (!values.profile) return async () => {};
  const session = new Session();
  session.connect();
  await session.post("Profiler.enable");
  await session.post("Profiler.start");
  return async () => {
    const { profile } = await session.post("Profiler.stop");
    session.disconnect();
    const dir = resolve(values.profile!);
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, `driver-${name}-${Date.now()}.cpuprofile`), JSON.stringify(profile));
  };
}

/** Warm-up, then the measured batch: elapsed time, CPU by part, database and Redis activity. */
async function measure(name: string, phase: Phase, withStats: boolean): Promise<PhaseResult> {
  const waitFor = async (total: number, deadline: number): Promise<{ lastEndMs: number; polls: number }> => {
    for (let polls = 1; ; polls++) {
      const p = await phase.progress(total);
      if (p.done) return { lastEndMs: p.lastEndMs!, polls };
      if (Date.now() > deadline) {
        throw new Error(`${name}: ${p.count}/${total} sessions finished after ${PHASE_TIMEOUT_MS} ms`);
      }
      await sleep(POLL_MS);
    }
  };
  if (WARMUP > 0) {
    await phase.submit(SESSIONS, WARMUP);
    await waitFor(WARMUP, Date.now() + PHASE_TIMEOUT_MS);
  }
  if (withStats) await sleep(STATS_SETTLE_MS);
  const dbBefore = withStats ? await dbActivity(phase.sql) : null;
  const workerPids = phase.workers.map((w) => w.child.pid!);
  const redisPids = await redisServerPids(phase.redis);
  const stopProfile = await driverProfile(name);
  const window = new CpuWindow();
  window.start([process.pid, ...workerPids, ...pidsByName("postgres"), ...redisPids]);

  const started = Date.now();
  await phase.submit(0, SESSIONS);
  const submitMs = Date.now() - started;
  const { lastEndMs, polls } = await waitFor(WARMUP + SESSIONS, started + PHASE_TIMEOUT_MS);

  const backends = await phase.sql<{ pid: number }[]>`
    select pid from pg_stat_activity where datname = current_database()`;
  const cpu = window.stop({
    [phase.driverLabel]: [process.pid],
    workers: workerPids,
    "postgres backends": backends.map((b) => b.pid),
    [REDIS_COMM]: redisPids,
  });
  await stopProfile();
  let db: DbActivity | null = null;
  if (dbBefore) {
    await sleep(STATS_SETTLE_MS);
    const dbAfter = await dbActivity(phase.sql);
    // This script's own polls and the two statistics reads are not the phase's work.
    const ownXacts = polls + 2;
    db = {
      xacts: dbAfter.xacts - dbBefore.xacts - ownXacts,
      fetched: dbAfter.fetched - dbBefore.fetched,
      inserted: dbAfter.inserted - dbBefore.inserted,
      updated: dbAfter.updated - dbBefore.updated,
      hotUpdated: dbAfter.hotUpdated - dbBefore.hotUpdated,
    };
  }
  return { elapsedMs: lastEndMs - started, submitMs, note: await phase.verify(WARMUP + SESSIONS), cpu, db };
}

/** The fleet session with this index: one tool call, then an answer; no model latency. */
const agentOf = (index: number) => benchAgent(index, `Done with session ${index}.`);

/** How the fleet phase submits: the FleetClient over HTTP, or the FleetService in this process. */
async function fleetProducer(
  config: FleetConfig,
  cleanup: Cleanup,
  apiUrl: string,
): Promise<Pick<FleetClient, "createSession" | "send">> {
  if (VIA !== "service") return new FleetClient({ baseUrl: apiUrl });
  const { service } = inProcessService(config, cleanup);
  return {
    createSession: (input) => service.createSession(DEFAULT_TENANT, input),
    send: (sessionId, content) => service.sendMessage(DEFAULT_TENANT, sessionId, { content }),
  };
}

async function runFleet(cleanup: Cleanup, redis: Redis, withStats: boolean): Promise<PhaseResult> {
  const { databaseUrl, env, config } = await scratchFleet(cleanup, redis, "tp", CONCURRENCY);

  const api = await startApi(config, { port: 0 });
  cleanup.add("stop the API", () => api.stop());
  if (WITH_SWEEPER) {
    const sweeper = await startSweeper(config, { serveMetrics: false });
    cleanup.add("stop the sweeper", () => sweeper.stop());
  }
  const workers = await Promise.all(
    Array.from({ length: WORKERS }, () => spawnFleetWorker(env, WORKER_NODE_ARGS)),
  );
  cleanup.add("stop fleet workers", () => Promise.all(workers.map((w) => stopChild(w, "SIGTERM"))));
  const sql = postgres(databaseUrl, { max: 1, onnotice: () => {} });
  cleanup.add("close the fleet poller", () => sql.end({ timeout: 5 }));
  const producer = await fleetProducer(config, cleanup, api.url);

  return measure(
    "fleet",
    {
      sql,
      redis,
      workers,
      driverLabel: `driver (${VIA === "batch" ? "API batches" : VIA === "http" ? "API" : "service"}${WITH_SWEEPER ? ", sweeper" : ""}, submit)`,
      submit: async (from, count) => {
        const indexes = Array.from({ length: count }, (_, i) => from + i);
        if (VIA === "batch") {
          const client = new FleetClient({ baseUrl: api.url });
          const chunks: number[][] = [];
          for (let i = 0; i < indexes.length; i += BATCH_SIZE) chunks.push(indexes.slice(i, i + BATCH_SIZE));
          await inPool(chunks, Math.max(1, Math.ceil(SUBMITTERS / 8)), (chunk) =>
            client.createBatch(
              chunk.map((index) => ({
                agent: agentOf(index),
                input: `Session ${index}: use the tool, then answer.`,
              })),
              EVENTS_OPTION,
            ),
          );
          return;
        }
        await inPool(indexes, SUBMITTERS, async (index) => {
          const { id: sessionId } = await producer.createSession({
            agent: agentOf(index),
            ...EVENTS_OPTION,
          });
          await producer.send(sessionId, `Session ${index}: use the tool, then answer.`);
        });
      },
      // Finished: the session's answer is stored and no run is still queued or running. Polled
      // only after every session was submitted, so while any run is unfinished the poll reads
      // just the partial index of unfinished runs (the full counts would cost the database
      // more than a worker's statements), and the full counts once, at the end.
      progress: async (total) => {
        const [open] = await sql<{ unfinished: number }[]>`
          select count(*)::int as unfinished from runs where status <> 'ended'`;
        if (open!.unfinished > 0)
          return { done: false, count: Math.max(0, total - open!.unfinished), lastEndMs: null };
        const [row] = await sql<{ completed: number; last_end_ms: number | null }[]>`
          select (select count(*)::int from sessions where tail_state = 'completed') as completed,
                 (select (extract(epoch from max(ended_at)) * 1000)::float8 from runs) as last_end_ms`;
        return { done: row!.completed >= total, count: row!.completed, lastEndMs: row!.last_end_ms };
      },
      verify: async (total) => {
        const [check] = await sql<{ messages: number; bad_sessions: number; not_completed: number }[]>`
          select (select count(*)::int from messages) as messages,
                 (select count(*)::int from (select session_id from messages group by 1 having count(*) <> 4) b)
                   as bad_sessions,
                 (select count(*)::int from runs where ended_reason is distinct from 'completed') as not_completed`;
        return check!.messages === total * MESSAGES_PER_SESSION &&
          check!.bad_sessions === 0 &&
          check!.not_completed === 0
          ? "verified: 4 messages and 1 completed run per session"
          : `CHECK FAILED: ${check!.messages} messages for ${total} sessions, ` +
              `${check!.bad_sessions} sessions without 4, ${check!.not_completed} runs not completed`;
      },
    },
    withStats,
  );
}

async function runBaseline(cleanup: Cleanup, redis: Redis, withStats: boolean): Promise<PhaseResult> {
  const id = shortId();
  const dbName = `fleet_bench_base_${id}`;
  const databaseUrl = await createScratchDatabase(dbName);
  cleanup.add(`drop database ${dbName}`, () => dropScratchDatabase(dbName));
  const prefix = `bench-base-${id}`;
  cleanup.add(`delete Redis keys ${prefix}:*`, () => deleteRedisPrefix(redis, prefix));
  const toolDir = await mkdtemp(join(tmpdir(), "fleet-bench-base-"));
  cleanup.add(`remove ${toolDir}`, () => rm(toolDir, { recursive: true, force: true }));

  const sql = postgres(databaseUrl, { max: 1, onnotice: () => {} });
  cleanup.add("close the baseline poller", () => sql.end({ timeout: 5 }));
  await sql`
    create table messages (
      session_id text not null,
      seq int not null,
      role text not null,
      content text not null,
      tool_calls jsonb,
      tool_call_id text,
      created_at timestamptz not null default now(),
      primary key (session_id, seq))`;

  const queueName = "sessions";
  const env: Record<string, string> = {
    BASELINE_DATABASE_URL: databaseUrl,
    BASELINE_REDIS_URL: REDIS_URL,
    BASELINE_PREFIX: prefix,
    BASELINE_QUEUE: queueName,
    BASELINE_TOOL_DIR: toolDir,
    BASELINE_CONCURRENCY: String(CONCURRENCY),
  };
  const workerFile = resolve(ROOT, "bench/baseline-worker.ts");
  const workers = await Promise.all(
    Array.from({ length: WORKERS }, () =>
      spawnUntilReady([...WORKER_NODE_ARGS, "--import", "tsx", workerFile], env, /baseline worker ready/),
    ),
  );
  cleanup.add("stop baseline workers", () => Promise.all(workers.map((w) => stopChild(w, "SIGTERM"))));
  const queueRedis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
  const queue = new Queue(queueName, {
    connection: queueRedis,
    prefix,
    // The same job options as the fleet's runs queue.
    defaultJobOptions: {
      attempts: 5,
      backoff: { type: "exponential", delay: 500 },
      removeOnComplete: { age: 3_600, count: 10_000 },
      removeOnFail: { age: 7 * 24 * 3_600 },
    },
  });
  cleanup.add("close the baseline queue", async () => {
    await queue.close();
    await queueRedis.quit();
  });

  return measure(
    "baseline",
    {
      sql,
      redis,
      workers,
      driverLabel: "driver (queue.add)",
      submit: (from, count) =>
        inPool(
          Array.from({ length: count }, (_, i) => from + i),
          SUBMITTERS,
          (index) => queue.add("session", { sessionId: `s-${index}`, index }, { jobId: `session-${index}` }),
        ),
      progress: async (total) => {
        const [row] = await sql<{ done: number; last_ms: number | null }[]>`
          select count(*)::int as done, (extract(epoch from max(created_at)) * 1000)::float8 as last_ms
            from messages where seq = 4`;
        return { done: row!.done >= total, count: row!.done, lastEndMs: row!.last_ms };
      },
      verify: async (total) => {
        const [check] = await sql<{ messages: number }[]>`select count(*)::int as messages from messages`;
        return check!.messages === total * MESSAGES_PER_SESSION
          ? "verified: 4 messages per session"
          : `CHECK FAILED: ${check!.messages} messages for ${total} sessions`;
      },
    },
    withStats,
  );
}

type Measured = { name: "fleet" | "baseline"; round: number; result: PhaseResult };

function minMedMax(samples: number[]): string {
  if (samples.length === 0) return "n/a";
  const sorted = [...samples].sort((a, b) => a - b);
  return `${fmt(sorted[0]!)} / ${fmt(median(sorted))} / ${fmt(sorted.at(-1)!)}`;
}

function report(results: Measured[]): void {
  const perSession = (n: number) => fmt(n / SESSIONS, 2);
  const rate = (r: PhaseResult) => SESSIONS / (r.elapsedMs / 1000);
  const label = (name: string) =>
    name === "fleet"
      ? `fleet (${VIA === "batch" ? "HTTP batches" : VIA === "http" ? "FleetClient → HTTP API" : "FleetService"})`
      : "baseline (BullMQ + pg)";
  const rates = [["", "sessions/s min / median / max", "runs", "median elapsed", "median submit"]];
  for (const name of ["fleet", "baseline"] as const) {
    const mine = results.filter((r) => r.name === name);
    if (mine.length === 0) continue;
    rates.push([
      label(name),
      minMedMax(mine.map((r) => rate(r.result))),
      String(mine.length),
      `${fmt(median(mine.map((r) => r.result.elapsedMs)) / 1000, 2)} s`,
      `${fmt(median(mine.map((r) => r.result.submitMs)) / 1000, 2)} s`,
    ]);
  }
  console.log("");
  console.log(table(rates));
  const fleet = results.filter((r) => r.name === "fleet");
  const baseline = results.filter((r) => r.name === "baseline");
  if (fleet.length > 0 && baseline.length > 0) {
    // Each round's ratio (its two sides ran back to back), and the ratio of the medians.
    const perRound = fleet.flatMap((f) => {
      const b = baseline.find((x) => x.round === f.round);
      return b ? [rate(f.result) / rate(b.result)] : [];
    });
    const medianRatio =
      median(fleet.map((r) => rate(r.result))) / median(baseline.map((r) => rate(r.result)));
    console.log(
      `ratio fleet/baseline (sessions/s): median ${fmt(medianRatio, 2)}; per round ${perRound.map((r) => fmt(r, 2)).join(", ")}  (aim ≥ 0.70)`,
    );
  }

  console.log("");
  console.log("per session, in each side's first round (CPU in ms; the machine has 2 cores):");
  const costs = [
    [
      "",
      "CPU driver",
      "CPU workers",
      "CPU postgres",
      "CPU redis",
      "pg xacts",
      "pg rows written",
      "HOT updates",
      "busy",
    ],
  ];
  for (const { name, result } of results.filter((r) => r.result.db !== null)) {
    const [driver, workers, pg, redis] = Object.values(result.cpu.groups).map((s) => perSession(s * 1000));
    const db = result.db!;
    costs.push([
      name,
      driver!,
      workers!,
      pg!,
      redis!,
      perSession(db.xacts),
      perSession(db.inserted + db.updated),
      db.updated > 0 ? `${fmt((100 * db.hotUpdated) / db.updated, 0)} %` : "n/a",
      `${fmt((100 * result.cpu.machineBusy) / Math.max(result.cpu.machineTotal, 1e-9), 0)} %`,
    ]);
  }
  console.log(table(costs));
  console.log(
    "(pg: this database's backends; xacts: commits, an explicit transaction counting once, the " +
      "sweeper's polling included; HOT: updates that touched no index; CPU redis: the server at " +
      "BENCH_REDIS_URL, its other users included; busy: the whole machine)",
  );
}

async function main(): Promise<number> {
  const began = Date.now();
  console.log(
    `throughput: ${SESSIONS} sessions (+${WARMUP} warm-up, not counted) × ${MESSAGES_PER_SESSION} messages, ` +
      `${WORKERS} worker processes × concurrency ${CONCURRENCY}, ${SUBMITTERS} submissions in flight`,
  );
  console.log(
    `fleet: ${
      VIA === "batch"
        ? `POST /v1/batches of ${BATCH_SIZE} through the FleetClient to an in-process API`
        : VIA === "http"
          ? "FleetClient over HTTP to an in-process API (create session + send)"
          : "FleetService called in-process (create session + send)"
    }, sweeper ${WITH_SWEEPER ? "in-process" : "off"}, scripted model with no delay${
      SESSION_EVENTS ? "" : ", sessions created with sessionEvents: false (no per-session event streams)"
    }`,
  );
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
  const results: Measured[] = [];
  let failed = false;
  for (let round = 0; round < ROUNDS && !failed; round++) {
    // Alternate which side goes first, so neither always runs on a warmer (or hotter) machine.
    const order = round % 2 === 0 ? (["fleet", "baseline"] as const) : (["baseline", "fleet"] as const);
    for (const name of order) {
      if (ONLY !== "both" && ONLY !== name) continue;
      // Each phase has its own cleanup, so the next one starts on a quiet machine.
      const cleanup = new Cleanup();
      const withStats = round === 0;
      try {
        const result = await (name === "fleet"
          ? runFleet(cleanup, redis, withStats)
          : runBaseline(cleanup, redis, withStats));
        results.push({ name, round, result });
        console.log(
          `  round ${round + 1}/${ROUNDS} ${name}: ${fmt(SESSIONS / (result.elapsedMs / 1000))} sessions/s, ` +
            `${fmt(result.elapsedMs / 1000, 2)} s (${result.note})`,
        );
        if (result.note.startsWith("CHECK FAILED")) failed = true;
      } catch (error) {
        failed = true;
        console.error(`  ${name} failed: ${(error as Error).message}`);
      } finally {
        await cleanup.run();
      }
    }
  }
  await redis.quit();
  if (results.length > 0) report(results);
  console.log(`total run time: ${fmt((Date.now() - began) / 1000, 1)} s`);
  return failed ? 1 : 0;
}

// Exit explicitly: a keep-alive socket or timer left by a library must not hold the run open.
process.exit(await main());
