/**
 * `npm run bench:fairness`: does one tenant's large batch starve another tenant's sessions?
 *
 * Per mode (FLEET_FAIR_DISPATCH=off, the first-in-first-out baseline, then on), in the same
 * run: a fresh fleet (API in-process, N worker processes), tenant `batch` submits --batch
 * scripted sessions that each sleep --sleep-ms in a tool; once they are queued, tenant
 * `interactive` creates --interactive sessions one every --every-ms and waits for each.
 * Printed: the interactive sessions' latency (create → run ended) and how long the batch
 * took, per mode, and the ratio off/on.
 */
import { Redis } from "ioredis";
import { startApi } from "../src/producer/api-server.js";
import { FleetClient } from "../src/producer/client.js";
import { openDatabase } from "../src/shared/db/client.js";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import {
  benchOptions,
  Cleanup,
  fmt,
  inPool,
  median,
  percentile,
  REDIS_URL,
  scratchFleet,
  sleep,
  spawnFleetWorker,
  stopChild,
  table,
  waitUntil,
  wholeNumber,
} from "./support.js";

const values = benchOptions({
  batch: { type: "string", default: "2000" },
  interactive: { type: "string", default: "20" },
  "every-ms": { type: "string", default: "150" },
  "sleep-ms": { type: "string", default: "40" },
  workers: { type: "string", default: "2" },
  concurrency: { type: "string", default: "8" },
});
const num = (name: keyof typeof values) => wholeNumber(name, values[name] as string | undefined);
const BATCH = num("batch");
const INTERACTIVE = num("interactive");
const EVERY_MS = num("every-ms");
const SLEEP_MS = num("sleep-ms");
const WORKERS = num("workers");
const CONCURRENCY = num("concurrency");

const agent = (ms: number) => ({
  model: {
    provider: "scripted" as const,
    steps: [{ toolCalls: [{ id: "nap", name: "sleep", arguments: { ms } }] }, { text: "done" }],
  },
  tools: ["sleep"],
});

type ModeResult = { mode: string; latencies: number[]; batchSeconds: number };

async function runMode(mode: "on" | "off", cleanup: Cleanup, redis: Redis): Promise<ModeResult> {
  const fleet = await scratchFleet(cleanup, redis, `fair${mode}`, CONCURRENCY);
  const env = { ...fleet.env, FLEET_FAIR_DISPATCH: mode };
  const database = openDatabase(fleet.databaseUrl, { max: 2 });
  cleanup.add("close database", () => database.close());
  const keys = new ApiKeys(database);
  const api = await startApi({ ...fleet.config, fairDispatch: mode === "on" }, { port: 0 });
  cleanup.add("stop API", () => api.stop());
  const workers = [];
  for (let i = 0; i < WORKERS; i++) workers.push(await spawnFleetWorker(env));
  const batchClient = new FleetClient({ baseUrl: api.url, apiKey: (await keys.create("batch")).key });
  const interactive = new FleetClient({ baseUrl: api.url, apiKey: (await keys.create("interactive")).key });

  const started = Date.now();
  const chunks = Array.from({ length: Math.ceil(BATCH / 500) }, (_, i) =>
    Array.from({ length: Math.min(500, BATCH - i * 500) }, (_, j) => ({
      agent: agent(SLEEP_MS),
      input: `item ${i * 500 + j}`,
    })),
  );
  await inPool(chunks, 2, (chunk) => batchClient.createBatch(chunk));
  const latencies: number[] = [];
  const waits: Promise<void>[] = [];
  for (let i = 0; i < INTERACTIVE; i++) {
    const t0 = Date.now();
    const { id } = await interactive.createSession({ agent: agent(1) });
    const { runId } = await interactive.send(id, "hello");
    waits.push(
      interactive.waitForRun(runId, { timeoutMs: 600_000, intervalMs: 20 }).then(() => {
        latencies.push(Date.now() - t0);
      }),
    );
    await sleep(EVERY_MS);
  }
  await Promise.all(waits);
  await waitUntil(
    async () => {
      const [row] = await database.sql<{ n: number }[]>`
        select count(*)::int as n from runs where tenant = 'batch' and status <> 'ended'`;
      return row!.n === 0;
    },
    900_000,
    "the batch to end",
    200,
  );
  const batchSeconds = (Date.now() - started) / 1000;
  for (const worker of workers) await stopChild(worker, "SIGTERM");
  return { mode, latencies, batchSeconds };
}

async function main(): Promise<void> {
  const cleanup = new Cleanup();
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  cleanup.add("close Redis", async () => redis.disconnect());
  try {
    console.log(
      `fairness: tenant "batch" queues ${BATCH} sessions (${SLEEP_MS} ms tool each); tenant "interactive" starts ${INTERACTIVE}, one every ${EVERY_MS} ms; ${WORKERS} workers × ${CONCURRENCY} slots`,
    );
    const results: ModeResult[] = [];
    for (const mode of ["off", "on"] as const) results.push(await runMode(mode, cleanup, redis));
    const rows = results.map((r) => [
      r.mode === "off" ? "first in, first out (off)" : "fair dispatch (on)",
      fmt(median(r.latencies), 0),
      fmt(percentile(r.latencies, 95), 0),
      fmt(Math.max(...r.latencies), 0),
      fmt(r.batchSeconds, 1),
    ]);
    console.log(table([["mode", "interactive p50 ms", "p95 ms", "max ms", "batch s"], ...rows]));
    const [off, on] = results as [ModeResult, ModeResult];
    console.log(
      `interactive p50: ${fmt(median(off.latencies) / median(on.latencies), 1)}× shorter with fair dispatch; ` +
        `batch took ${fmt(on.batchSeconds / off.batchSeconds, 2)}× as long`,
    );
  } finally {
    await cleanup.run();
  }
}

await main();
