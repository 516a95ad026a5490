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
 * session's first run started (both from the first submit).
 *
 *   npm run bench:scale -- --levels 100,300,1000 --with-3000
 */
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { parseArgs } from "node:util";
import { Queue } from "bullmq";
import { Redis } from "ioredis";
import postgres from "postgres";
import { FleetService } from "../src/producer/fleet-service.js";
import type { AgentConfigInput } from "../src/shared/agent-config.js";
import { openDatabase } from "../src/shared/db/client.js";
import { createMetrics } from "../src/shared/metrics.js";
import { RunQueues } from "../src/shared/queues.js";
import { closeRedis, createRedis } from "../src/shared/redis.js";
import { DEFAULT_TENANT } from "../src/shared/store/api-keys.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { FleetToolNames, readToolNames } from "../src/shared/tool-names.js";
import { startSweeper } from "../src/sweeper/sweeper-process.js";
import {
  Cleanup,
  deleteRedisPrefix,
  fmt,
  inPool,
  parsed,
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

const { values } = parsed(() =>
  parseArgs({
    options: {
      levels: { type: "string", default: "100,300,1000" },
      "with-3000": { type: "boolean", default: false },
      concurrency: { type: "string", default: "1000" },
      steps: { type: "string", default: "3" },
      "delay-ms": { type: "string", default: "1000" },
      sweeper: { type: "string", default: "on" },
      /** Write a V8 CPU profile of each fleet worker process into this directory. */
      profile: { type: "string" },
      /** off: the fleet's batches are created with `sessionEvents: false` (no per-session event streams). */
      "session-events": { type: "string", default: "on" },
    },
  }),
);

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
const BATCH = 1_000;
const TIMEOUT_MS = 300_000;

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
    const worker = await spawnFleetWorker(
      env,
      values.profile ? ["--cpu-prof", `--cpu-prof-dir=${resolve(values.profile)}`] : [],
    );
    cleanup.add("stop the worker", () => stopChild(worker, "SIGTERM"));
    const database = openDatabase(config.databaseUrl);
    const producerRedis = createRedis(config.redisUrl, "producer");
    const queues = new RunQueues(producerRedis, config.prefix);
    cleanup.add("close the FleetService", async () => {
      await queues.close();
      await closeRedis(producerRedis);
      await database.close();
    });
    const service = new FleetService({
      queries: new SessionQueries(database),
      queues,
      metrics: createMetrics("bench"),
      toolNames: new FleetToolNames(() => readToolNames(producerRedis, config.prefix)),
      models: config.models,
    });
    const sql = postgres(databaseUrl, { max: 1, onnotice: () => {} });
    cleanup.add("close the poller", () => sql.end({ timeout: 5 }));

    const chunks = Array.from({ length: Math.ceil(sessions / BATCH) }, (_, i) =>
      Math.min(BATCH, sessions - i * BATCH),
    );
    const started = Date.now();
    await inPool(chunks, 4, (count) =>
      service.createBatch(DEFAULT_TENANT, {
        sessions: Array.from({ length: count }, () => ({ agent: agent(), input: "Go." })),
        ...(SESSION_EVENTS ? {} : { sessionEvents: false }),
      }),
    );
    const submittedMs = Date.now() - started;
    for (;;) {
      const [row] = await sql<
        { ended: number; completed: number; last_ms: number | null; last_start_ms: number | null }[]
      >`
        select count(*) filter (where status = 'ended')::int as ended,
               count(*) filter (where ended_reason = 'completed')::int as completed,
               (extract(epoch from max(ended_at)) * 1000)::float8 as last_ms,
               (extract(epoch from max(started_at)) * 1000)::float8 as last_start_ms
          from runs`;
      if (row!.ended >= sessions) {
        if (row!.completed !== sessions)
          throw new Error(
            `fleet: ${row!.completed} of ${sessions} runs completed (the others ended otherwise)`,
          );
        return {
          elapsedMs: row!.last_ms! - started,
          rssMb: peakRssMb(worker.child.pid!),
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
    };
    const worker: ReadyChild = await spawnUntilReady(
      ["--import", "tsx", resolve(ROOT, "bench/scale-sleeper.ts")],
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
    const started = Date.now();
    for (let i = 0; i < sessions; i += BATCH)
      await queue.addBulk(
        Array.from({ length: Math.min(BATCH, sessions - i) }, (_, k) => ({ name: "s", data: { i: i + k } })),
      );
    for (;;) {
      const counts = await queue.getJobCounts("completed", "failed");
      if ((counts.completed ?? 0) + (counts.failed ?? 0) >= sessions) {
        const done = await queue.getJobs(["completed"], 0, sessions);
        const last = Math.max(...done.map((job) => job.finishedOn ?? 0));
        return { elapsedMs: last - started, rssMb: peakRssMb(worker.child.pid!) };
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
      `${SESSION_EVENTS ? "" : ", batches with sessionEvents: false"}; levels ${LEVELS.join(", ")}`,
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
      "BullMQ sleepers",
      "% of ideal",
      "peak RSS",
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
      `${fmt(result.bullmq!.elapsedMs / 1000, 2)} s`,
      pct(result.bullmq!),
      `${fmt(result.bullmq!.rssMb, 0)} MB`,
    ];
    rows.push(row);
    console.log(`  ${row.join("  ")}`);
  }
  await redis.quit();
  console.log("");
  console.log(table(rows));
  console.log(`total run time: ${fmt((Date.now() - began) / 1000, 1)} s`);
  return failed ? 1 : 0;
}

process.exit(await main());
