/**
 * `npm run soak -- --minutes N`: a fleet run for a long time under a mixed, continuous load,
 * sampled every --sample-s seconds into a CSV, then a report of what grew and how fast.
 *
 * The fleet is `fleet up` from dist/ (as deployed: run `npm run build` first) with 2 workers,
 * on a scratch database and FLEET_PREFIX of its own on DATABASE_URL's server and REDIS_URL.
 * The load (soak-load.ts): a batch of 200–400 scripted sessions (a tool call, small delays)
 * every --batch-every-s seconds with a webhook to a local receiver that fails 1 in 10
 * deliveries; a quarter of the batches cancelled whole, some sessions cancelled one by one;
 * follow-ups on 10 long sessions; SSE readers that connect, read and disconnect, some slow;
 * list, batch and results reads. Worker 0 is SIGKILLed every --kill-every-s seconds (`fleet
 * up` restarts it), worker 1 lives throughout, the API is restarted once at half time.
 *
 * Samples: RSS and open fds of every process (/proc), heap used, event-loop lag p99 and
 * active handles (/metrics), the metrics endpoints' series count and size, Redis used_memory
 * and the prefix's keys by pattern, BullMQ set sizes, Postgres table bytes, live and dead
 * tuples. The report fits a growth per hour to each series after the warm-up.
 *
 *   npm run soak -- --minutes 40 [--keep] [--csv soak.csv]
 */
import { type ChildProcess, spawn } from "node:child_process";
import { appendFileSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Redis } from "ioredis";
import postgres from "postgres";
import { freePort } from "./chaos-fleet.js";
import { type LoadStats, startLoad } from "./soak-load.js";
import { postgresFigures, procStats, redisFigures, report, type Sample, scrape } from "./soak-sample.js";
import {
  benchOptions,
  Cleanup,
  createScratchDatabase,
  deleteRedisPrefix,
  dropScratchDatabase,
  FLEET_BIN,
  REDIS_URL,
  ROOT,
  shortId,
  sleep,
  wholeNumber,
} from "./support.js";

const values = benchOptions({
  minutes: { type: "string", default: "40" },
  "sample-s": { type: "string", default: "30" },
  "batch-every-s": { type: "string", default: "60" },
  "kill-every-s": { type: "string", default: "180" },
  "warmup-min": { type: "string", default: "5" },
  csv: { type: "string" },
  keep: { type: "boolean", default: false },
});
const minutes = wholeNumber("minutes", values.minutes);
const sampleMs = wholeNumber("sample-s", values["sample-s"]) * 1000;
const killEveryMs = wholeNumber("kill-every-s", values["kill-every-s"]) * 1000;
const warmupMs = wholeNumber("warmup-min", values["warmup-min"], 0) * 60_000;

const cleanup = new Cleanup();
const id = shortId();
const dbName = `fleet_soak_${id}`;
const prefix = `soak-${id}`;
const csvPath = values.csv ?? join(tmpdir(), `fleet-soak-${id}.csv`);
const log = (line: string) => console.log(`[${new Date().toISOString().slice(11, 19)}] ${line}`);

const databaseUrl = await createScratchDatabase(dbName);
const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 3 });
const sql = postgres(databaseUrl, { max: 1, onnotice: () => {} });
cleanup.add("close admin connections", async () => {
  redis.disconnect();
  await sql.end();
});
if (!values.keep) {
  cleanup.add(`drop database ${dbName}`, () => dropScratchDatabase(dbName));
  cleanup.add(`delete Redis keys ${prefix}:*`, () => deleteRedisPrefix(redis, prefix));
}

const [apiPort, metricsBase, hookPort] = [await freePort(), await freePort(), await freePort()];
const apiKey = `soak-${id}-${"k".repeat(32)}`;
const env: Record<string, string> = {
  DATABASE_URL: databaseUrl,
  REDIS_URL,
  FLEET_PREFIX: prefix,
  FLEET_TOOL_DIR: mkdtempSync(join(tmpdir(), "fleet-soak-")),
  FLEET_BOOTSTRAP_KEY: apiKey,
  FLEET_WEBHOOK_SECRET: "soak-webhook-secret",
  FLEET_WEBHOOK_ALLOWED_URLS: `http://127.0.0.1:${hookPort}/`,
  PORT: String(apiPort),
  LOG_LEVEL: "warn",
};

// `fleet up`: the supervisor's lines name each child's pid as it starts and restarts.
const pids = new Map<string, number>();
const generation = new Map<string, number>();
const up: ChildProcess = spawn(
  process.execPath,
  [FLEET_BIN, "up", "--workers", "2", "--metrics-port-base", String(metricsBase)],
  { cwd: ROOT, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] },
);
let upTail = "";
const onLine = (data: Buffer) => {
  upTail = (upTail + data).slice(-8000);
  for (const m of String(data).matchAll(/fleet up: (?:re)?started (api|sweeper|worker \d) \(pid (\d+)\)/g)) {
    pids.set(m[1]!, Number(m[2]));
    generation.set(m[1]!, (generation.get(m[1]!) ?? -1) + 1);
  }
};
up.stdout?.on("data", onLine);
up.stderr?.on("data", onLine);
const upExited = new Promise<void>((done) => up.once("exit", () => done()));
cleanup.add("stop fleet up", async () => {
  if (up.exitCode === null && up.signalCode === null) up.kill("SIGTERM");
  await Promise.race([upExited, sleep(30_000)]);
});
const deadline = Date.now() + 120_000;
while (!/fleet up: API on/.test(upTail)) {
  if (Date.now() > deadline || up.exitCode !== null) {
    console.error(upTail);
    await cleanup.run();
    process.exit(1);
  }
  await sleep(200);
}
log(`fleet up (pid ${up.pid}): database ${dbName}, prefix ${prefix}, API :${apiPort}, CSV ${csvPath}`);

const metricsUrls: Record<string, string> = {
  api: `http://127.0.0.1:${apiPort}/metrics`,
  "worker 0": `http://127.0.0.1:${metricsBase}/metrics`,
  "worker 1": `http://127.0.0.1:${metricsBase + 1}/metrics`,
  sweeper: `http://127.0.0.1:${metricsBase + 2}/metrics`,
};

const samples: Sample[] = [];
writeFileSync(csvPath, "t,elapsed_s,source,metric,value\n");
const started = Date.now();
const load: LoadStats = startLoad({
  baseUrl: `http://127.0.0.1:${apiPort}`,
  apiKey,
  hookPort,
  batchEveryMs: wholeNumber("batch-every-s", values["batch-every-s"]) * 1000,
  log,
});
cleanup.add("stop the load", () => load.stop());

async function sampleOnce(): Promise<void> {
  const now = Date.now();
  const batch: Sample[] = [];
  const add = (source: string, metric: string, value: number) =>
    batch.push({ t: now, source, metric, value });
  const upStats = procStats(up.pid!);
  if (upStats) {
    add("proc", "up rss", upStats.rss);
    add("proc", "up fds", upStats.fds);
  }
  for (const [name, pid] of pids) {
    // A restarted process is a new series: its growth is measured over its own lifetime.
    const who = `${name}#${generation.get(name)}`;
    const stats = procStats(pid);
    if (stats) {
      add("proc", `${who} rss`, stats.rss);
      add("proc", `${who} fds`, stats.fds);
    }
    const figures = await scrape(metricsUrls[name]!);
    for (const [metric, value] of Object.entries(figures ?? {})) add("metrics", `${who} ${metric}`, value);
  }
  for (const s of await redisFigures(redis, prefix)) add(s.source, s.metric, s.value);
  for (const s of await postgresFigures(sql)) add(s.source, s.metric, s.value);
  for (const [metric, value] of Object.entries(load.counts)) add("load", metric, value);
  samples.push(...batch);
  appendFileSync(
    csvPath,
    `${batch.map((s) => `${s.t},${((s.t - started) / 1000).toFixed(0)},${s.source},"${s.metric}",${s.value}`).join("\n")}\n`,
  );
}

let nextKill = started + killEveryMs;
let apiRestarted = false;
const end = started + minutes * 60_000;
while (Date.now() < end) {
  await sampleOnce().catch((error) => log(`sample failed: ${(error as Error).message}`));
  const c = load.counts;
  log(
    `sessions ${c.sessions}, batches ${c.batches} (ended ${c.batchesEnded}), follow-ups ${c.followUps}, cancels ${c.cancels}, ` +
      `SSE ${c.sseOpened} (events ${c.sseEvents}), webhooks ${c.webhooks}, errors ${c.errors}`,
  );
  const wake = Math.min(Date.now() + sampleMs, end);
  while (Date.now() < wake) {
    if (Date.now() >= nextKill) {
      nextKill += killEveryMs;
      const pid = pids.get("worker 0");
      if (pid) {
        log(`SIGKILL worker 0 (pid ${pid})`);
        process.kill(pid, "SIGKILL");
      }
    }
    if (!apiRestarted && Date.now() >= started + (minutes * 60_000) / 2) {
      apiRestarted = true;
      const pid = pids.get("api");
      if (pid) {
        log(`SIGTERM the API (pid ${pid}); fleet up restarts it`);
        process.kill(pid, "SIGTERM");
      }
    }
    await sleep(1000);
  }
}
log("load stopped; 60 s for the fleet to drain, then a last sample");
await load.stop();
await sleep(60_000);
await sampleOnce();

console.log(`\n${minutes} min, ${load.counts.sessions} sessions; warm-up ${warmupMs / 60_000} min excluded.`);
console.log(report(samples, started + warmupMs));
log(`CSV: ${csvPath}${values.keep ? `; kept database ${dbName} and prefix ${prefix}` : ""}`);
await cleanup.run();
process.exit(0);
