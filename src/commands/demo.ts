/**
 * `fleet demo`: the main job on defaults. Creates and migrates its database, starts an API,
 * a sweeper and worker processes, submits a batch of scripted sessions that use tools,
 * SIGKILLs one worker mid-batch, shows its sessions coming back, and prints a report.
 */
import type { ChildProcess } from "node:child_process";
import { mkdir, readFile, rm } from "node:fs/promises";
import { join } from "node:path";
import postgres from "postgres";
import { startApi } from "../producer/api-server.js";
import { FleetClient } from "../producer/client.js";
import type { AgentConfigInput } from "../shared/agent-config.js";
import { type FleetConfig, loadConfig } from "../shared/config.js";
import { databaseName, openDatabase } from "../shared/db/client.js";
import { ValidationError } from "../shared/errors.js";
import { closeRedis, createRedis, deleteKeys } from "../shared/redis.js";
import { ApiKeys } from "../shared/store/api-keys.js";
import { takeFleet } from "../shared/store/fleet-identity.js";
import { startSweeper } from "../sweeper/sweeper-process.js";
import { type DemoReport, formatReport, readReport } from "./demo-report.js";
import { MAX_DEMO_SESSIONS } from "./flag-values.js";
import { exitCodeOf, stopSignal } from "./interrupt.js";
import { migrate, spawnRole, workerReady } from "./serve.js";

/**
 * A session's script: write a report, take a nap (the window in which a worker is killed),
 * append one line to a shared log, answer. Every fourth session's first model call fails
 * once before any output and is retried.
 */
export function demoAgent(index: number): AgentConfigInput {
  const flaky = index % 4 === 0;
  return {
    model: {
      provider: "scripted",
      steps: [
        {
          toolCalls: [
            {
              name: "write_file",
              arguments: { path: `reports/report-${index}.txt`, content: `report ${index}\n` },
            },
            { name: "sleep", arguments: { ms: 1_500 } },
          ],
          delayMs: 20,
          ...(flaky ? { fault: "connection" as const, faultTimes: 1 } : {}),
        },
        {
          toolCalls: [{ name: "append_file", arguments: { path: "batch.log", line: `session ${index}` } }],
          delayMs: 20,
        },
        { text: `Done: wrote report-${index}.txt and logged it.`, delayMs: 20 },
      ],
    },
    tools: ["write_file", "append_file", "sleep"],
    system: "You are a demo agent.",
    maxTurns: 10,
  };
}

function stopChild(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once("exit", () => resolve());
    child.kill("SIGTERM");
  });
}

/** Lines per session in the shared log: each must be 1 (append_file ran exactly once). */
async function appendsPerSession(toolDir: string, sessions: number): Promise<number[]> {
  const text = await readFile(join(toolDir, "batch.log"), "utf8").catch(() => "");
  const counts = new Array<number>(sessions).fill(0);
  for (const line of text.split("\n")) {
    const match = /^session (\d+)$/.exec(line);
    if (match) counts[Number(match[1])]! += 1;
  }
  return counts;
}

/** The worker with the most sessions inside a tool call right now, and how many. */
async function busiestInsideTool(
  database: ReturnType<typeof openDatabase>,
): Promise<{ workerId: string; count: number } | null> {
  const [row] = await database.sql<{ worker_id: string; n: number }[]>`
    select r.worker_id, count(*)::int as n from runs r join sessions s on s.id = r.session_id
     where r.status = 'running' and s.tail_state = 'tools_pending'
     group by r.worker_id order by n desc limit 1`;
  return row ? { workerId: row.worker_id, count: row.n } : null;
}

export type DemoOptions = {
  /** Sessions in the batch. Default 20. */
  sessions?: number;
  /** Worker processes. Default 2. */
  workers?: number;
  /** SIGKILL a worker mid-batch (when there are at least two). Default true. */
  kill?: boolean;
};

export async function demoCommand(options: DemoOptions = {}): Promise<number> {
  const sessions = options.sessions ?? 20;
  const workers = options.workers ?? 2;
  if (!Number.isInteger(sessions) || sessions < 1 || sessions > MAX_DEMO_SESSIONS)
    throw new ValidationError(
      "--sessions",
      `must be a whole number from 1 to ${MAX_DEMO_SESSIONS} (one batch)`,
    );
  if (!Number.isInteger(workers) || workers < 1)
    throw new ValidationError("--workers", "must be a whole number ≥ 1");
  const kill = options.kill !== false && workers >= 2;

  const base = loadConfig();
  // Its own database, queue namespace and tool directory, so a demo never touches a fleet
  // (`fleet up` uses DATABASE_URL; the demo the same server's database of that name + `_demo`).
  const prefix = `${base.prefix}-demo`;
  const toolDir = join(base.toolDir, "demo");
  // On loopback: with no API key stored the demo needs none (contracts §10).
  const config = {
    ...base,
    databaseUrl: demoDatabaseUrl(base.databaseUrl),
    prefix,
    toolDir,
    host: "127.0.0.1",
    logLevel: "warn" as const,
  };
  await migrate(config, { withRedis: true });
  const release = await holdDemoDatabase(config.databaseUrl);
  try {
    return await runDemo(config, sessions, workers, kill);
  } finally {
    await release();
  }
}

/**
 * Holds the demo's database for its whole run (a session's advisory lock), or refuses: a
 * second `fleet demo` of the same environment (another terminal) took the same database,
 * queue namespace and folder, emptied the first's files, ran its sessions and appended to
 * its log, so that both reports said every log line was written more than once; the first
 * to end deleted the other's queues. Its own connection, never idle-closed (which would let
 * the lock go); a demo that dies lets it go with its connection.
 */
async function holdDemoDatabase(url: string): Promise<() => Promise<void>> {
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  const [row] = await sql<{ held: boolean }[]>`
    select pg_try_advisory_lock(hashtextextended('agent-fleet demo', 0)) as held`;
  if (!row?.held) {
    await sql.end({ timeout: 1 });
    throw new ValidationError(
      "",
      `another \`fleet demo\` is running on database "${databaseName(url)}": wait for it to end (two demos on one database run each other's sessions and write the same files)`,
    );
  }
  return () => sql.end({ timeout: 5 });
}

async function runDemo(
  config: FleetConfig,
  sessions: number,
  workers: number,
  kill: boolean,
): Promise<number> {
  const { prefix, toolDir } = config;
  const owner = openDatabase(config.databaseUrl, { max: 1 });
  await takeFleet(owner, prefix).finally(() => owner.close());
  await rm(toolDir, { recursive: true, force: true });
  await mkdir(toolDir, { recursive: true });

  console.log(
    `fleet demo: ${sessions} sessions, ${workers} worker process${workers === 1 ? "" : "es"}, a sweeper; queue prefix ${prefix}`,
  );
  const api = await startApi(config, { port: 0 });
  const sweeper = await startSweeper(config, { serveMetrics: false });
  const env = {
    DATABASE_URL: config.databaseUrl,
    FLEET_PREFIX: prefix,
    FLEET_TOOL_DIR: toolDir,
    LOG_LEVEL: "error",
    METRICS_PORT: "0",
    WORKER_CONCURRENCY: String(Math.max(8, sessions)),
  };
  const stop = stopSignal();
  const children = Array.from({ length: workers }, () => spawnRole("worker", env, [], "pipe"));
  const database = openDatabase(config.databaseUrl, { max: 2 });
  // API keys exist in this database: the demo uses a key of its own, revoked when it ends.
  let demoKey: { key: string; id: string } | undefined;
  let client: FleetClient | undefined;
  let batchId: string | undefined;
  try {
    if (!api.devMode) demoKey = await new ApiKeys(database).create("demo");
    const workerIds = await Promise.race([Promise.all(children.map(workerReady)), stop.signalled]);
    if (!Array.isArray(workerIds)) return exitCodeOf(workerIds);
    client = new FleetClient({ baseUrl: api.url, apiKey: demoKey?.key });
    const started = Date.now();
    // One request for the whole batch, as a backend would submit it.
    const batch = await client.createBatch(
      Array.from({ length: sessions }, (_, i) => ({
        agent: demoAgent(i),
        metadata: { demo: true, index: i },
        input: `Write report ${i} and log it.`,
      })),
    );
    batchId = batch.id;
    const ids = batch.sessions.map((s) => s.id);
    let report: DemoReport;
    let shown = "";
    let killedAt: number | null = null;
    for (;;) {
      if (stop.signal) return exitCodeOf(stop.signal);
      report = await readReport(database, ids);
      const busiest = kill && killedAt === null ? await busiestInsideTool(database) : null;
      const victim = busiest ? children[workerIds.indexOf(busiest.workerId)] : undefined;
      if (busiest && victim && busiest.count >= Math.min(3, Math.ceil(sessions / (2 * workers)))) {
        victim.kill("SIGKILL");
        killedAt = Date.now();
        console.log(
          `  ✗ SIGKILLed worker ${busiest.workerId} while ${busiest.count} of its sessions were inside a tool`,
        );
      }
      const line = `  completed ${report.completed}/${sessions} sessions, ${report.messages} messages, ${report.resumes} resumes`;
      if (process.stdout.isTTY) process.stdout.write(`\r${line}`);
      else if (line !== shown) console.log(line);
      shown = line;
      if (report.completed + report.stopped === sessions) break;
      if (Date.now() - started > 120_000) throw new Error("the demo did not finish within 2 minutes");
      await Promise.race([new Promise((r) => setTimeout(r, 200)), stop.signalled]);
    }
    if (process.stdout.isTTY) process.stdout.write("\n");
    const appends = await appendsPerSession(toolDir, sessions);
    console.log(formatReport(report, Date.now() - started, toolDir, killedAt, appends));
    const clean =
      report.completed === sessions && report.toolCallsAnsweredTwice === 0 && appends.every((n) => n === 1);
    return clean ? 0 : 1;
  } finally {
    // Stopped by a signal: its sessions cancelled, so that nothing is left to resume (the
    // next demo's sweeper ran them beside its own); a second Ctrl-C ends the stop at once.
    stop.off();
    if (stop.signal && client && batchId) await client.cancelBatch(batchId).catch(() => {});
    if (demoKey) await new ApiKeys(database).revoke(demoKey.id);
    await Promise.all(children.map(stopChild));
    await sweeper.stop();
    await api.stop();
    await database.close();
    // The demo's queue namespace is its own: leave nothing behind in Redis. (Its sessions
    // stay in Postgres to be looked at.)
    await deleteRedisKeys(config.redisUrl, `${prefix}:*`);
    if (stop.signal)
      console.error(
        `fleet demo: stopped by ${stop.signal}; ${batchId ? `its batch ${batchId} was cancelled and ` : ""}its processes stopped`,
      );
  }
}

/** The demo's own database: DATABASE_URL's, named with `_demo` added. */
export function demoDatabaseUrl(url: string): string {
  const name = databaseName(url);
  if (name.endsWith("_demo")) return url;
  const demo = new URL(url);
  demo.pathname = `/${encodeURIComponent(`${name}_demo`)}`;
  return demo.toString();
}

async function deleteRedisKeys(url: string, pattern: string): Promise<void> {
  const redis = createRedis(url, "producer");
  try {
    // Every master of a cluster (redis.ts), not the one node a SCAN would be routed to.
    await deleteKeys(redis, pattern);
  } finally {
    await closeRedis(redis);
  }
}
