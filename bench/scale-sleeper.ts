/**
 * bench/scale.ts's baseline worker: a plain BullMQ Worker whose jobs sleep `steps` times
 * `delayMs` (what a fleet session with a scripted model of that many steps spends waiting),
 * with no lease, Postgres or events. Started as `node --import tsx bench/scale-sleeper.ts`,
 * configured through the environment; prints its ready line on stdout.
 */
import { Worker } from "bullmq";
import { Redis } from "ioredis";
import { fetcherSlots } from "../src/worker/fetchers.js";

const env = (name: string): string => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};

const connection = new Redis(env("SCALE_REDIS_URL"), { maxRetriesPerRequest: null });
const steps = Number(env("SCALE_STEPS"));
const delayMs = Number(env("SCALE_DELAY_MS"));
// SCALE_FETCHERS (default 1): that many BullMQ Workers share the slots, as the fleet's do (fetchers.ts).
const slots = fetcherSlots(Number(env("SCALE_CONCURRENCY")), Number(process.env.SCALE_FETCHERS ?? 1));
const workers = slots.map(
  (concurrency) =>
    new Worker(
      env("SCALE_QUEUE"),
      async () => {
        for (let i = 0; i < steps; i++) await new Promise((done) => setTimeout(done, delayMs));
      },
      { connection, prefix: env("SCALE_PREFIX"), concurrency },
    ),
);
for (const worker of workers) worker.on("error", (error) => console.error(`scale sleeper: ${error.message}`));
await Promise.all(workers.map((worker) => worker.waitUntilReady()));
console.log(`scale sleeper ready: pid ${process.pid}`);

const stop = async () => {
  await Promise.all(workers.map((worker) => worker.close()));
  await connection.quit();
  process.exit(0);
};
process.once("SIGTERM", () => void stop());
process.once("SIGINT", () => void stop());
