/**
 * The recovery baseline's worker: a plain BullMQ Worker with BullMQ's default lock and
 * stalled-job settings (lockDuration 30 s, stalledInterval 30 s, maxStalledCount 1) whose
 * jobs sleep for a long time. When the processor starts a job it records who started it
 * and when in a Redis list, so bench/recovery.ts can see when a second process picks up a
 * job whose first worker was killed. Configured through the environment.
 */
import { Worker } from "bullmq";
import { Redis } from "ioredis";
import { sleeperStartsKey } from "./support.js";

const env = (name: string): string => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};

const redisUrl = env("SLEEPER_REDIS_URL");
const prefix = env("SLEEPER_PREFIX");
const queueName = env("SLEEPER_QUEUE");
const role = env("SLEEPER_ROLE");
const concurrency = Number(env("SLEEPER_CONCURRENCY"));

const connection = new Redis(redisUrl, { maxRetriesPerRequest: null });
const marks = new Redis(redisUrl, { maxRetriesPerRequest: null });

// Only the concurrency is set (the victim holds several jobs at once); every lock and
// stalled-job option keeps BullMQ's default — unless SLEEPER_LOCK_MS / SLEEPER_STALLED_MS
// tune them (the "tuned" baseline: 5 s / 5 s, as an operator who cares would set them).
const tuned = {
  ...(process.env.SLEEPER_LOCK_MS ? { lockDuration: Number(process.env.SLEEPER_LOCK_MS) } : {}),
  ...(process.env.SLEEPER_STALLED_MS ? { stalledInterval: Number(process.env.SLEEPER_STALLED_MS) } : {}),
};
const worker = new Worker(
  queueName,
  async (job) => {
    await marks.rpush(
      sleeperStartsKey(prefix),
      JSON.stringify({ jobId: job.id, role, pid: process.pid, at: Date.now() }),
    );
    await new Promise((done) => setTimeout(done, 600_000));
  },
  { connection, prefix, concurrency, ...tuned },
);
worker.on("error", (error) => console.error(`sleeper ${role}: ${error.message}`));
await worker.waitUntilReady();
console.log(`bullmq sleeper ready: ${role} pid ${process.pid}`);
