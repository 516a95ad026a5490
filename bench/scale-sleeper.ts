/**
 * bench/scale.ts's baseline worker: a plain BullMQ Worker whose jobs sleep `steps` times
 * `delayMs` (what a fleet session with a scripted model of that many steps spends waiting),
 * with no lease, Postgres or events. Started as `node --import tsx bench/scale-sleeper.ts`,
 * configured through the environment; prints its ready line on stdout.
 */
import { Worker } from "bullmq";
import { Redis } from "ioredis";

const env = (name: string): string => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};

const connection = new Redis(env("SCALE_REDIS_URL"), { maxRetriesPerRequest: null });
const steps = Number(env("SCALE_STEPS"));
const delayMs = Number(env("SCALE_DELAY_MS"));
const worker = new Worker(
  env("SCALE_QUEUE"),
  async () => {
    for (let i = 0; i < steps; i++) await new Promise((done) => setTimeout(done, delayMs));
  },
  { connection, prefix: env("SCALE_PREFIX"), concurrency: Number(env("SCALE_CONCURRENCY")) },
);
worker.on("error", (error) => console.error(`scale sleeper: ${error.message}`));
await worker.waitUntilReady();
console.log(`scale sleeper ready: pid ${process.pid}`);

const stop = async () => {
  await worker.close();
  await connection.quit();
  process.exit(0);
};
process.once("SIGTERM", () => void stop());
process.once("SIGINT", () => void stop());
