/**
 * `npm run bench:scale`: how close one worker process gets to the ideal when it holds many
 * slow sessions at once — the start ramp (lease, claim and first run of every session) and
 * the event loop under load, not the model.
 *
 * For each level N (default 100, 300, 1,000; `--with-3000` adds 3,000): a scratch fleet
 * (database, FLEET_PREFIX, the sweeper in this process) and ONE `fleet worker` with
 * WORKER_CONCURRENCY = --concurrency (default 1,000); N sessions whose scripted model takes
 * --delay-ms (default 1,000) per step for --steps steps (default 3: two `sleep 0` tool calls,
 * then the answer), submitted at once as batches of 1,000 through the FleetService in this
 * process. Elapsed: first submit → the last run's ended_at. Ideal: steps × delay ×
 * ⌈N / concurrency⌉. Next to it, in the same run, plain BullMQ jobs that sleep the same
 * (bench/scale-sleeper.ts, one process, the same concurrency, added with addBulk); the two
 * sides alternate which goes first from level to level. Peak RSS: the worker's VmHWM.
 * "submitted": when the last batch was stored and enqueued; "last start": when the last
 * session's first run started (both from the first submit). "worker CPU": the CPU time
 * (user + system) the worker process used from the first submit to the end, from /proc: less
 * disturbed by other load on the machine than the elapsed time. `--timeline` prints, per
 * side, when the jobs were added and fetched (BullMQ's `timestamp`, `processedOn`) and, for
 * the fleet, when its runs started and each message (by seq) was stored: min / p50 / p90 /
 * max from the first submit. `--warmup N`: each side's process first runs N sessions (jobs)
 * like the measured ones, not counted (a worker that has been up a while, its code compiled by
 * V8; default 0: a fresh process). `--gc` runs both workers with V8's `--trace-gc-nvp` and prints,
 * per side, what they allocated and what their young collector copied and promoted over the
 * measured part, per session (bench/gc-trace.ts): counts a loaded machine changes little. The
 * measured part is bracketed by a full collection at each end (bench/gc-mark.mjs), so its bytes
 * are exact (one more mark-compact is counted); the worker's CPU is read inside the brackets.
 * `--sleeper-fetchers N` spreads the sleepers' slots over N BullMQ
 * Workers, as the fleet's worker spreads its own (src/worker/fetchers.ts; default 1).
 *
 *   npm run bench:scale -- --levels 100,300,1000 --with-3000
 */
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { Queue } from "bullmq";
import { Redis } from "ioredis";
import postgres from "postgres";
import type { AgentConfigInput } from "../src/shared/agent-config.js";
import { DEFAULT_TENANT } from "../src/shared/store/api-keys.js";
import { startSweeper } from "../src/sweeper/sweeper-process.js";
import { GC_MARK_ARGS, type GcTotals, gcLine, gcTotals, markGc } from "./gc-trace.js";
import { inProcessService } from "./producer.js";
import {
  benchOptions,
  Cleanup,
  deleteRedisPrefix,
  fmt,
  inPool,
  REDIS_URL,
  type ReadyChild,
  ROOT,
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
  levels: { type: "string", default: "100,300,1000" },
  "with-3000": { type: "boolean", default: false },
  concurrency: { type: "string", default: "1000" },
  steps: { type: "string", default: "3" },
  "delay-ms": { type: "string", default: "1000" },
  sweeper: { type: "string", default: "on" },
  /**
   * Run each side's worker with V8's `--trace-gc-nvp` and print its collections over the
   * measured part (bench/gc-trace.ts): bytes allocated, copied and promoted per session.
   */
  gc: { type: "boolean", default: false },
  /** Write a V8 CPU profile of each fleet worker process into this directory. */
  profile: { type: "string" },
  /** off: the fleet's batches are created with `sessionEvents: false` (no per-session event streams). */
  "session-events": { type: "string", default: "on" },
  /** Print when each message of the sessions was stored (by seq) and when their runs started. */
  timeline: { type: "boolean", default: false },
  /** BullMQ Workers the sleepers' slots are spread over (the fleet's worker uses fetchers.ts's default). */
  "sleeper-fetchers": { type: "string", default: "1" },
  /**
   * Sessions (jobs) each side's process runs first, not counted, the same as the measured
   * ones: a worker that has been up for a while (its code compiled by V8), not a fresh one.
   */
  warmup: { type: "string", default: "0" },
});

const LEVELS = [
  ...new Set([
    ...(values.levels ?? "")
      .split(",")
      .filter(Boolean)
      .map((l) => wholeNumber("levels", l, 1)),
    ...(values["with-3000"] ? [3000] : []),
  ]),
];
const CONCURRENCY = wholeNumber("concurrency", values.concurrency, 1);
const STEPS = wholeNumber("steps", values.steps, 1);
const DELAY_MS = wholeNumber("delay-ms", values["delay-ms"], 1);
if (values.sweeper !== "on" && values.sweeper !== "off") throw new Error("--sweeper must be on or off");
const WITH_SWEEPER = values.sweeper === "on";
if (values["session-events"] !== "on" && values["session-events"] !== "off")
  throw new Error("--session-events must be on or off");
const SESSION_EVENTS = values["session-events"] !== "off";
const SLEEPER_FETCHERS = wholeNumber("sleeper-fetchers", values["sleeper-fetchers"], 1);
const WARMUP = wholeNumber("warmup", values.warmup, 0);
const GC_ARGS = values.gc ? GC_MARK_ARGS : [];
const BATCH = 1_000;
const TIMEOUT_MS = 300_000;

/** CPU time a process has used so far (user + system), in ms. */
function cpuMs(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8")
    .replace(/^.*\) /, "")
    .split(" ");
  // After the command: state is field 3, utime 14 and stime 15 (1-based, proc(5)); clock ticks of 10 ms.
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

/** Peak resident set of a process, in MB (VmHWM). */
function peakRssMb(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const kb = Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? Number.NaN);
  return kb / 1024;
}

function agent(): AgentConfigInput {
  // A step with text spends its whole delayMs (half before the first chunk, half across the
  // chunks); one with only tool calls would spend half of it (scripted.ts).
  const tool = {
    text: "Calling the tool.",
    toolCalls: [{ name: "sleep", arguments: { ms: 0 } }],
    delayMs: DELAY_MS,
  };
  return {
    model: {
      provider: "scripted",
      steps: [...Array.from({ length: STEPS - 1 }, () => tool), { text: "Done.", delayMs: DELAY_MS }],
    },
    tools: ["sleep"],
  };
}

type Side = {
  elapsedMs: number;
  rssMb: number;
  /** CPU the worker process used from the first submit to the end (ms). */
  cpuMs: number;
  /** With --gc: the worker's collections from the first submit to the end. */
  gc?: GcTotals;
  /** Submit → all sessions submitted, and → the last first run started (ms). */
  submittedMs?: number;
  lastStartMs?: number;
};

async function fleetLevel(redis: Redis, sessions: number): Promise<Side> {
  const cleanup = new Cleanup();
  try {
    const { databaseUrl, env, config } = await scratchFleet(cleanup, redis, "scale", CONCURRENCY);
    if (WITH_SWEEPER) {
      const sweeper = await startSweeper(config, { serveMetrics: false });
      cleanup.add("stop the sweeper", () => sweeper.stop());
    }
    const worker = await spawnFleetWorker(env, [
      ...(values.profile ? ["--cpu-prof", `--cpu-prof-dir=${resolve(values.profile)}`] : []),
      ...GC_ARGS,
    ]);
    cleanup.add("stop the worker", () => stopChild(worker, "SIGTERM"));
    const { service, redis: producerRedis } = inProcessService(config, cleanup);
    const sql = postgres(databaseUrl, { max: 1, onnotice: () => {} });
    cleanup.add("close the poller", () => sql.end({ timeout: 5 }));

    const submit = (n: number) =>
      inPool(
        Array.from({ length: Math.ceil(n / BATCH) }, (_, i) => Math.min(BATCH, n - i * BATCH)),
        4,
        (count) =>
          service.createBatch(DEFAULT_TENANT, {
            sessions: Array.from({ length: count }, () => ({ agent: agent(), input: "Go." })),
            ...(SESSION_EVENTS ? {} : { sessionEvents: false }),
          }),
      );
    if (WARMUP > 0) {
      await submit(WARMUP);
      const until = Date.now() + TIMEOUT_MS;
      for (;;) {
        const [row] = await sql<{ ended: number }[]>`
          select count(*)::int as ended from runs where status = 'ended'`;
        if (row!.ended >= WARMUP) break;
        if (Date.now() > until) throw new Error(`fleet warm-up: ${row!.ended}/${WARMUP} runs ended`);
        await sleep(100);
      }
    }
    // With --gc, the measured part starts and ends with a full collection (gc-trace.ts markGc).
    const outputBefore = values.gc ? await markGc(worker, 1) : worker.output().length;
    const cpuBefore = cpuMs(worker.child.pid!);
    const started = Date.now();
    await submit(sessions);
    const submittedMs = Date.now() - started;
    // The warm-up's runs were created before `started`: only the measured ones are read.
    const since = new Date(started - 1);
    for (;;) {
      const [row] = await sql<
        { ended: number; completed: number; last_ms: number | null; last_start_ms: number | null }[]
      >`
        select count(*) filter (where status = 'ended')::int as ended,
               count(*) filter (where ended_reason = 'completed')::int as completed,
               (extract(epoch from max(ended_at)) * 1000)::float8 as last_ms,
               (extract(epoch from max(started_at)) * 1000)::float8 as last_start_ms
          from runs where created_at >= ${since}`;
      if (row!.ended >= sessions) {
        if (row!.completed !== sessions) {
          const outcomes = await sql<{ outcome: string; kind: string; n: number }[]>`
            select coalesce(ended_reason, status) as outcome, kind, count(*)::int as n
              from runs where created_at >= ${since} group by 1, 2 order by 3 desc`;
          throw new Error(
            `fleet: ${row!.completed} of ${sessions} runs completed; runs by outcome: ${outcomes
              .map((o) => `${o.kind} ${o.outcome} ${o.n}`)
              .join(", ")}`,
          );
        }
        if (values.timeline) {
          const runsQueue = new Queue("runs", { connection: producerRedis, prefix: config.prefix });
          printJobTimes(
            (await runsQueue.getJobs(["completed"], 0, WARMUP + sessions)).filter(
              (j) => j.timestamp >= started,
            ),
            started,
          );
          await runsQueue.close();
          await printTimeline(sql, started);
        }
        const cpuUsed = cpuMs(worker.child.pid!) - cpuBefore;
        const outputAfter = values.gc ? await markGc(worker, 2) : 0;
        return {
          elapsedMs: row!.last_ms! - started,
          rssMb: peakRssMb(worker.child.pid!),
          cpuMs: cpuUsed,
          ...(values.gc ? { gc: gcTotals(worker.output().slice(outputBefore, outputAfter)) } : {}),
          submittedMs,
          lastStartMs: row!.last_start_ms! - started,
        };
      }
      if (Date.now() - started > TIMEOUT_MS) throw new Error(`fleet: ${row!.ended}/${sessions} runs ended`);
      await sleep(100);
    }
  } finally {
    await cleanup.run();
  }
}

/** When the jobs were added (BullMQ's `timestamp`) and fetched (`processedOn`), from the start. */
function printJobTimes(jobs: { timestamp: number; processedOn?: number }[], started: number): void {
  const line = (what: string, ms: number[]) => {
    const sorted = ms.sort((a, b) => a - b);
    const at = (q: number) =>
      fmt(sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]! - started, 0);
    console.log(
      `    ${what.padEnd(12)} n ${String(sorted.length).padStart(5)}  min ${at(0).padStart(5)}  p50 ${at(0.5).padStart(5)}  p90 ${at(0.9).padStart(5)}  max ${at(1).padStart(5)} ms`,
    );
  };
  line(
    "job added",
    jobs.map((j) => j.timestamp),
  );
  line(
    "job fetched",
    jobs.map((j) => j.processedOn ?? Number.NaN),
  );
}

/** Min / p50 / p90 / max of when each seq was stored and each run started, from the first submit. */
async function printTimeline(sql: postgres.Sql, started: number): Promise<void> {
  const rows = await sql<{ what: string; n: number; min: number; p50: number; p90: number; max: number }[]>`
    with t as (
      select 'run started' as what, extract(epoch from started_at) * 1000 as ms from runs
      union all
      select 'run created', extract(epoch from created_at) * 1000 from runs
      union all
      select 'seq ' || seq, extract(epoch from created_at) * 1000 from messages
      union all
      select 'run ended', extract(epoch from ended_at) * 1000 from runs
    )
    select what, count(*)::int as n,
           (min(ms) - ${started})::float8 as min,
           (percentile_cont(0.5) within group (order by ms) - ${started})::float8 as p50,
           (percentile_cont(0.9) within group (order by ms) - ${started})::float8 as p90,
           (max(ms) - ${started})::float8 as max
      from t group by what order by min(ms)`;
  for (const r of rows)
    console.log(
      `    ${r.what.padEnd(12)} n ${String(r.n).padStart(5)}  min ${fmt(r.min, 0).padStart(5)}  p50 ${fmt(r.p50, 0).padStart(5)}  p90 ${fmt(r.p90, 0).padStart(5)}  max ${fmt(r.max, 0).padStart(5)} ms`,
    );
}

async function bullmqLevel(redis: Redis, sessions: number): Promise<Side> {
  const cleanup = new Cleanup();
  try {
    const prefix = `bench-scale-base-${shortId()}`;
    cleanup.add(`delete Redis keys ${prefix}:*`, () => deleteRedisPrefix(redis, prefix));
    const env = {
      SCALE_REDIS_URL: REDIS_URL,
      SCALE_PREFIX: prefix,
      SCALE_QUEUE: "sleepers",
      SCALE_STEPS: String(STEPS),
      SCALE_DELAY_MS: String(DELAY_MS),
      SCALE_CONCURRENCY: String(CONCURRENCY),
      SCALE_FETCHERS: String(SLEEPER_FETCHERS),
    };
    const worker: ReadyChild = await spawnUntilReady(
      [...GC_ARGS, "--import", "tsx", resolve(ROOT, "bench/scale-sleeper.ts")],
      env,
      /scale sleeper ready/,
    );
    cleanup.add("stop the sleeper", () => stopChild(worker, "SIGTERM"));
    const connection = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
    const queue = new Queue("sleepers", { connection, prefix });
    cleanup.add("close the queue", async () => {
      await queue.close();
      await connection.quit();
    });
    const add = async (n: number) => {
      for (let i = 0; i < n; i += BATCH)
        await queue.addBulk(
          Array.from({ length: Math.min(BATCH, n - i) }, (_, k) => ({ name: "s", data: { i: i + k } })),
        );
    };
    const finished = async () => {
      const counts = await queue.getJobCounts("completed", "failed");
      return (counts.completed ?? 0) + (counts.failed ?? 0);
    };
    if (WARMUP > 0) {
      await add(WARMUP);
      const until = Date.now() + TIMEOUT_MS;
      while ((await finished()) < WARMUP) {
        if (Date.now() > until) throw new Error(`bullmq warm-up: ${await finished()}/${WARMUP} done`);
        await sleep(100);
      }
    }
    const outputBefore = values.gc ? await markGc(worker, 1) : worker.output().length;
    const cpuBefore = cpuMs(worker.child.pid!);
    const started = Date.now();
    await add(sessions);
    for (;;) {
      const counts = await queue.getJobCounts("completed", "failed");
      if ((counts.completed ?? 0) + (counts.failed ?? 0) >= WARMUP + sessions) {
        // The warm-up's jobs were added before `started`: only the measured ones are read.
        const done = (await queue.getJobs(["completed"], 0, WARMUP + sessions)).filter(
          (job) => job.timestamp >= started,
        );
        const last = Math.max(...done.map((job) => job.finishedOn ?? 0));
        if (values.timeline) printJobTimes(done, started);
        const cpuUsed = cpuMs(worker.child.pid!) - cpuBefore;
        const outputAfter = values.gc ? await markGc(worker, 2) : 0;
        return {
          elapsedMs: last - started,
          rssMb: peakRssMb(worker.child.pid!),
          cpuMs: cpuUsed,
          ...(values.gc ? { gc: gcTotals(worker.output().slice(outputBefore, outputAfter)) } : {}),
        };
      }
      if (Date.now() - started > TIMEOUT_MS) throw new Error(`bullmq: ${counts.completed}/${sessions} done`);
      await sleep(100);
    }
  } finally {
    await cleanup.run();
  }
}

async function main(): Promise<number> {
  const began = Date.now();
  console.log(
    `scale: one worker process, concurrency ${CONCURRENCY}, scripted model ${STEPS} steps × ${DELAY_MS} ms ` +
      `(two sleep-0 tool calls, then the answer), sweeper ${WITH_SWEEPER ? "in-process" : "off"}` +
      `${SESSION_EVENTS ? "" : ", batches with sessionEvents: false"}; levels ${LEVELS.join(", ")}` +
      `${WARMUP > 0 ? `; each process ran ${WARMUP} sessions (jobs) first, not counted` : ""}`,
  );
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
  const rows = [
    [
      "sessions",
      "ideal",
      "fleet",
      "% of ideal",
      "submitted",
      "last start",
      "peak RSS",
      "worker CPU",
      "BullMQ sleepers",
      "% of ideal",
      "peak RSS",
      "worker CPU",
    ],
  ];
  let failed = false;
  for (const [i, n] of LEVELS.entries()) {
    const ideal = STEPS * DELAY_MS * Math.ceil(n / CONCURRENCY);
    const result: { fleet?: Side; bullmq?: Side } = {};
    const order = i % 2 === 0 ? (["fleet", "bullmq"] as const) : (["bullmq", "fleet"] as const);
    try {
      for (const side of order)
        result[side] = side === "fleet" ? await fleetLevel(redis, n) : await bullmqLevel(redis, n);
    } catch (error) {
      failed = true;
      console.error(`  ${n} sessions failed: ${(error as Error).message}`);
      continue;
    }
    const pct = (s: Side) => `${fmt((100 * ideal) / s.elapsedMs, 0)} %`;
    const row = [
      n.toLocaleString("en"),
      `${fmt(ideal / 1000, 1)} s`,
      `${fmt(result.fleet!.elapsedMs / 1000, 2)} s`,
      pct(result.fleet!),
      `${fmt(result.fleet!.submittedMs! / 1000, 2)} s`,
      `${fmt(result.fleet!.lastStartMs! / 1000, 2)} s`,
      `${fmt(result.fleet!.rssMb, 0)} MB`,
      `${fmt(result.fleet!.cpuMs / 1000, 2)} s`,
      `${fmt(result.bullmq!.elapsedMs / 1000, 2)} s`,
      pct(result.bullmq!),
      `${fmt(result.bullmq!.rssMb, 0)} MB`,
      `${fmt(result.bullmq!.cpuMs / 1000, 2)} s`,
    ];
    rows.push(row);
    console.log(`  ${row.join("  ")}`);
    for (const side of ["fleet", "bullmq"] as const) {
      const gc = result[side]!.gc;
      if (gc) console.log(`    GC ${side === "fleet" ? "fleet   " : "sleepers"}: ${gcLine(gc, n)}`);
    }
  }
  await redis.quit();
  console.log("");
  console.log(table(rows));
  console.log(`total run time: ${fmt((Date.now() - began) / 1000, 1)} s`);
  return failed ? 1 : 0;
}

process.exit(await main());
