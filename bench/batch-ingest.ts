/**
 * `npm run bench:batch`: batch ingest through the real API (a `fleet api` child process),
 * next to plain BullMQ addBulk of the same number of jobs, in the same run; then the cost
 * of reading that batch back: its counts, and its results streamed as NDJSON.
 *
 * Ingest: one batch of N sessions (scripted, each with `input`, so each gets a queued run
 * and a job), sent as the CLI sends it: parts of 1,000 (the first creates the batch open,
 * the next are appended, the last closes it), --submitters parts in flight, each with an
 * Idempotency-Key. No worker runs: what is measured is accepting work. Reported: sessions
 * accepted per second and the API process's peak RSS during the phase (sampled every 50 ms).
 * Baseline: `Queue.addBulk` of N jobs of the same size in chunks of 1,000, same concurrency.
 *
 *   npm run bench:batch -- --sessions 100000 --submitters 2
 */
import { readFileSync } from "node:fs";
import { Queue } from "bullmq";
import { Redis } from "ioredis";
import { FleetClient } from "../src/producer/client.js";
import {
  benchOptions,
  Cleanup,
  FLEET_BIN,
  fmt,
  inPool,
  REDIS_URL,
  scratchFleet,
  spawnUntilReady,
  stopChild,
  wholeNumber,
} from "./support.js";

const values = benchOptions({
  sessions: { type: "string", default: "100000" },
  submitters: { type: "string", default: "2" },
});
const N = wholeNumber("sessions", values.sessions);
const SUBMITTERS = wholeNumber("submitters", values.submitters);
const PART = 1_000;

/** Samples a process's resident set size; `peak()` is the largest seen since `reset()`. */
function rssSampler(pid: number) {
  let peak = 0;
  const sample = () => {
    try {
      const kb = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? 0);
      peak = Math.max(peak, kb * 1024);
    } catch {
      // the process is gone
    }
  };
  const timer = setInterval(sample, 50);
  return {
    reset: () => {
      peak = 0;
      sample();
    },
    peak: () => {
      sample();
      return peak;
    },
    stop: () => clearInterval(timer),
  };
}

const mb = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(0)} MB`;

async function main(): Promise<void> {
  const cleanup = new Cleanup();
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  try {
    const { env, config } = await scratchFleet(cleanup, redis, "batch", 8);
    const api = await spawnUntilReady([FLEET_BIN, "api", "--port", "0"], env, /fleet api ready: (\S+)/);
    cleanup.add("stop the API", () => stopChild(api, "SIGTERM"));
    const client = new FleetClient({ baseUrl: api.ready[1]! });
    const rss = rssSampler(api.child.pid!);
    cleanup.add("stop sampling", async () => rss.stop());

    const session = (i: number) => ({
      customId: `s-${i}`,
      agent: { model: { provider: "scripted" as const, steps: [{ text: `answer ${i}` }] } },
      input: `question ${i}`,
    });
    const parts = Array.from({ length: Math.ceil(N / PART) }, (_, p) =>
      Array.from({ length: Math.min(PART, N - p * PART) }, (_, i) => session(p * PART + i)),
    );
    const baselineRss = rss.peak();

    // Fleet: the first part creates the batch open; the rest are appended; the last closes it.
    rss.reset();
    let started = performance.now();
    const { id } = await client.createBatch(parts[0]!, { open: parts.length > 1, idempotencyKey: "bench-0" });
    await inPool(
      parts.slice(1).map((part, i) => ({ part, i: i + 1 })),
      SUBMITTERS,
      async ({ part, i }) => {
        await client.appendToBatch(id, part, { idempotencyKey: `bench-${i}`, close: false });
      },
    );
    if (parts.length > 1) await client.appendToBatch(id, [], { close: true, idempotencyKey: "bench-close" });
    const ingestMs = performance.now() - started;
    const ingestRss = rss.peak();

    // Baseline: the same number of jobs, plain addBulk, same payload size and concurrency.
    const queue = new Queue("bench-addbulk", { connection: redis, prefix: config.prefix });
    cleanup.add("close the baseline queue", () => queue.close());
    started = performance.now();
    await inPool(parts, SUBMITTERS, async (part) => {
      await queue.addBulk(part.map((s) => ({ name: "run", data: s })));
    });
    const addBulkMs = performance.now() - started;

    // Reading it back: counts, then every result streamed.
    started = performance.now();
    const batch = await client.getBatch(id);
    const countsMs = performance.now() - started;
    if (batch.counts.total !== N)
      throw new Error(`expected ${N} sessions, the batch counts ${batch.counts.total}`);
    rss.reset();
    const resultsStartRss = rss.peak();
    started = performance.now();
    let lines = 0;
    for await (const _ of client.batchResults(id)) lines++;
    const resultsMs = performance.now() - started;
    const resultsRss = rss.peak();
    if (lines !== N) throw new Error(`expected ${N} result lines, got ${lines}`);

    const rate = (ms: number) => `${fmt(N / (ms / 1000))}/s`;
    console.log(`batch ingest, ${N} sessions in parts of ${PART}, ${SUBMITTERS} in flight`);
    console.log(
      `  fleet POST /v1/batches (+ /sessions)  ${fmt(ingestMs / 1000)} s  ${rate(ingestMs)} sessions accepted; API RSS ${mb(baselineRss)} idle, peak ${mb(ingestRss)}`,
    );
    console.log(
      `  BullMQ addBulk, same jobs           ${fmt(addBulkMs / 1000)} s  ${rate(addBulkMs)} jobs added`,
    );
    console.log(`  GET /v1/batches/:id (counts)        ${fmt(countsMs)} ms`);
    console.log(
      `  GET /v1/batches/:id/results         ${fmt(resultsMs / 1000)} s  ${rate(resultsMs)} lines; API RSS ${mb(resultsStartRss)} before, peak ${mb(resultsRss)}`,
    );
  } finally {
    await cleanup.run();
    redis.disconnect();
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
