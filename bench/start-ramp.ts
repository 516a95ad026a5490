/**
 * `npm run bench:start-ramp`: what one fleet worker does per session between a job's fetch
 * and its run's first model call — BullMQ's fetch, the lease, the claim that starts the run,
 * the run's first events, the agent's parse, the model's setup — and nothing after it.
 *
 * Each round: a scratch fleet and ONE `fleet worker` (WORKER_CONCURRENCY = --sessions); N
 * sessions whose scripted model waits --delay-ms (default 60 s, longer than the round) before
 * its only step, submitted as batches of 1,000 from this process. The measured part runs from
 * before the submit until every run has started and the worker has gone quiet (less than 10 ms
 * of CPU in 300 ms; lease renewals excepted), bracketed by full collections (gc-mark.mjs) so
 * that its bytes are exact. Per session: bytes allocated, scavenges, promises made,
 * AbortControllers, timers, socket writes and bytes to Postgres and Redis
 * (start-count.mjs), and the worker's CPU (/proc, 10 ms ticks). Then the worker is killed: the
 * sessions' steps are never taken.
 *
 * `--bin A,B` alternates rounds between fleet builds (each a path to its `bin/fleet.js`;
 * default this checkout's), so that two commits are compared in one sitting.
 *
 *   npm run bench:start-ramp -- --sessions 1000 --rounds 6 --bin bin/fleet.js,../base/bin/fleet.js
 */
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { Redis } from "ioredis";
import postgres from "postgres";
import { DEFAULT_TENANT } from "../src/shared/store/api-keys.js";
import { GC_MARK_ARGS, gcTotals, markGc } from "./gc-trace.js";
import { inProcessService } from "./producer.js";
import {
  benchOptions,
  Cleanup,
  FLEET_BIN,
  fmt,
  inPool,
  REDIS_URL,
  scratchFleet,
  sleep,
  spawnUntilReady,
  stopChild,
  usage,
  wholeNumber,
} from "./support.js";

const values = benchOptions({
  sessions: { type: "string", default: "1000" },
  rounds: { type: "string", default: "2" },
  "delay-ms": { type: "string", default: "60000" },
  bin: { type: "string", default: FLEET_BIN },
  warmup: { type: "string", default: "0" },
  /** Count promises too (a promise hook: it adds a promise per `await`, so the bytes are then not comparable). */
  promises: { type: "boolean", default: false },
  /** A module more to preload into the worker (a profiler started and stopped at the marks, say). */
  preload: { type: "string" },
});
const SESSIONS = wholeNumber("sessions", values.sessions, 1);
const ROUNDS = wholeNumber("rounds", values.rounds, 1);
const DELAY_MS = wholeNumber("delay-ms", values["delay-ms"], 1);
const WARMUP = wholeNumber("warmup", values.warmup, 0);
const BINS = (values.bin ?? FLEET_BIN).split(",").map((bin) => resolve(bin));
const COUNT_ARGS = [
  "--import",
  pathToFileURL(resolve(import.meta.dirname, "start-count.mjs")).href,
  ...(values.preload ? ["--import", pathToFileURL(resolve(values.preload)).href] : []),
];
const BATCH = 1_000;

/**
 * Whether `bin` would run its sources through tsx (bin/fleet.js does when a file under src/ is
 * newer than the build): that is not the build being measured, and allocates more.
 */
function staleBuild(bin: string): boolean {
  const root = dirname(dirname(bin));
  let built: number;
  try {
    built = statSync(join(root, "dist/src/cli.js")).mtimeMs;
  } catch {
    return true;
  }
  return readdirSync(join(root, "src"), { recursive: true, withFileTypes: true }).some(
    (entry) => entry.isFile() && statSync(join(entry.parentPath, entry.name)).mtimeMs > built,
  );
}
for (const bin of BINS)
  if (staleBuild(bin)) usage(`${bin}: src/ is newer than dist/ (npm run build there first)`);

function cpuMs(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8")
    .replace(/^.*\) /, "")
    .split(" ");
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

type Counts = {
  promises: number;
  abortControllers: number;
  timers: number;
  socketWrites: Record<string, number>;
  socketBytes: Record<string, number>;
};

/** The counts start-count.mjs printed at mark `mark` (right after gc-mark.mjs's line). */
async function countsAt(output: () => string, mark: number): Promise<Counts> {
  const until = Date.now() + 30_000;
  for (;;) {
    const line = new RegExp(`^start-count ${mark} (.*)$`, "m").exec(output());
    if (line) return JSON.parse(line[1]!) as Counts;
    if (Date.now() > until) throw new Error(`no start-count ${mark} in the worker's output`);
    await sleep(20);
  }
}

async function round(redis: Redis, bin: string): Promise<string> {
  const cleanup = new Cleanup();
  try {
    const { databaseUrl, env, config } = await scratchFleet(cleanup, redis, "ramp", SESSIONS);
    const worker = await spawnUntilReady(
      [...GC_MARK_ARGS, ...COUNT_ARGS, bin, "worker"],
      values.promises ? { ...env, START_COUNT_PROMISES: "1" } : env,
      /fleet worker ready: (\S+), metrics on port \d+/,
    );
    cleanup.add("stop the worker", () => stopChild(worker));
    const { service } = inProcessService(config, cleanup);
    const sql = postgres(databaseUrl, { max: 1, onnotice: () => {} });
    cleanup.add("close the poller", () => sql.end({ timeout: 5 }));
    const agent = (delayMs: number) => ({
      model: { provider: "scripted" as const, steps: [{ text: "Done.", delayMs }] },
      tools: [],
    });
    const submit = (n: number, delayMs: number) =>
      inPool(
        Array.from({ length: Math.ceil(n / BATCH) }, (_, i) => Math.min(BATCH, n - i * BATCH)),
        4,
        (count) =>
          service.createBatch(DEFAULT_TENANT, {
            sessions: Array.from({ length: count }, () => ({ agent: agent(delayMs), input: "Go." })),
          }),
      );
    const count = async (what: "started" | "ended") => {
      const [row] = await sql<{ n: number }[]>`
        select count(*)::int as n from runs
         where ${what === "started" ? sql`started_at is not null` : sql`status = 'ended'`}`;
      return row!.n;
    };
    if (WARMUP > 0) {
      await submit(WARMUP, 1);
      while ((await count("ended")) < WARMUP) await sleep(100);
    }
    const out = () => worker.output();
    const outputBefore = await markGc(worker, 1);
    const cpuBefore = cpuMs(worker.child.pid!);
    const started = Date.now();
    await submit(SESSIONS, DELAY_MS);
    while ((await count("started")) < WARMUP + SESSIONS) {
      if (Date.now() - started > 120_000) throw new Error("runs not started within 120 s");
      await sleep(50);
    }
    const startedMs = Date.now() - started;
    // Quiet: the first model calls are out and their events written.
    for (let last = cpuMs(worker.child.pid!); ; ) {
      await sleep(300);
      const now = cpuMs(worker.child.pid!);
      if (now - last < 10) break;
      last = now;
    }
    const cpu = cpuMs(worker.child.pid!) - cpuBefore;
    const outputAfter = await markGc(worker, 2);
    const gc = gcTotals(out().slice(outputBefore, outputAfter));
    const before = await countsAt(out, 1);
    const after = await countsAt(out, 2);
    // A preloaded profiler says `preload-done` once it has written what it took.
    if (values.preload) for (let i = 0; i < 600 && !out().includes("preload-done"); i++) await sleep(100);
    const per = (n: number) => fmt(n / SESSIONS, 2);
    const port = (what: "socketWrites" | "socketBytes", p: string) =>
      (after[what][p] ?? 0) - (before[what][p] ?? 0);
    const pg = new URL(databaseUrl).port || "5432";
    const rd = new URL(REDIS_URL).port || "6379";
    return [
      `started in ${fmt(startedMs / 1000, 2)} s`,
      `CPU ${per(cpu)} ms`,
      `allocated ${fmt(gc.allocatedBytes / 1024 / SESSIONS, 1)} KB (${gc.scavenges} scavenges, copied+promoted ${fmt((gc.survivedBytes + gc.promotedBytes) / 1024 / SESSIONS, 1)} KB)`,
      ...(values.promises ? [`promises ${per(after.promises - before.promises)}`] : []),
      `controllers ${per(after.abortControllers - before.abortControllers)}`,
      `timers ${per(after.timers - before.timers)}`,
      `writes pg ${per(port("socketWrites", pg))} (${fmt(port("socketBytes", pg) / SESSIONS, 0)} B) redis ${per(port("socketWrites", rd))} (${fmt(port("socketBytes", rd) / SESSIONS, 0)} B)`,
    ].join("; ");
  } finally {
    await cleanup.run();
  }
}

const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
console.log(
  `start ramp: ${SESSIONS} sessions a round, one worker of ${SESSIONS} slots, per session from the submit to every run started and the worker quiet`,
);
for (let i = 0; i < ROUNDS; i++)
  for (const bin of BINS)
    console.log(`  ${bin.replace(/\/bin\/fleet\.js$/, "")}: ${await round(redis, bin)}`);
await redis.quit();
process.exit(0);
