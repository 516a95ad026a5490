/**
 * Test isolation: every test file gets a fresh database and a fresh FLEET_PREFIX, its own
 * tool directory, and helpers to run the real API in-process and real workers as child
 * processes. `close()` stops everything it started and fails the file if a child is left.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { Redis } from "ioredis";
import postgres from "postgres";
import { type RunningApi, startApi } from "../../src/producer/api-server.js";
import { FleetClient } from "../../src/producer/client.js";
import { type FleetConfig, loadConfig } from "../../src/shared/config.js";
import { type Database, openDatabase } from "../../src/shared/db/client.js";
import { migrateDatabase } from "../../src/shared/db/migrate.js";
import { createRedis, deleteKeys, isClusterUrl } from "../../src/shared/redis.js";
import { copyName } from "./template-database.js";

export const ROOT = resolve(import.meta.dirname, "../..");
export const FLEET_BIN = join(ROOT, "bin/fleet.js");
const ADMIN_URL = process.env.TEST_ADMIN_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
/**
 * The Redis every fleet of a test run uses. `npm run test:cluster` points it at a Redis
 * Cluster it started (`redis+cluster://…`, vitest.cluster.config.ts); there a fleet's
 * FLEET_PREFIX is hash-tagged, `{t-…}`, as config.ts would make it anyway.
 */
const REDIS_URL = process.env.TEST_REDIS_URL ?? "redis://127.0.0.1:6379";

export type FleetEnv = {
  config: FleetConfig;
  /** Environment for child processes of this fleet. */
  env: Record<string, string>;
  database: Database;
  redis: Redis;
  startApi(): Promise<{ api: RunningApi; client: FleetClient }>;
  spawnWorker(extraEnv?: Record<string, string>, args?: string[]): Promise<WorkerProcess>;
  /** A `fleet sweeper` child of this fleet, once it is ready; `close()` stops it too. */
  spawnSweeper(extraEnv?: Record<string, string>): Promise<WorkerProcess>;
  close(): Promise<void>;
};

export type WorkerProcess = {
  child: ChildProcess;
  output: () => string;
  /** Resolves with the exit code (or signal) once the process has exited. */
  exited: Promise<number | string>;
};

export async function createFleetEnv(
  name: string,
  /**
   * `env`: more variables for the in-process API and every worker child, e.g. FLEET_ALLOWED_BASE_URLS.
   * `viaDatabase`: the DATABASE_URL the fleet's processes use, given the database's own (a
   * proxy in front of it: test/support/pg-proxy.ts); `database` still connects directly.
   * `adminUrl`: the Postgres server to make the fleet's database on (a private one:
   * test/support/private-postgres.ts), migrated there rather than copied from the run's template.
   */
  options: {
    redisUrl?: string;
    env?: Record<string, string>;
    viaDatabase?: (url: string) => string;
    adminUrl?: string;
  } = {},
): Promise<FleetEnv> {
  const redisUrl = options.redisUrl ?? REDIS_URL;
  const id = `${name
    .replace(/[^a-z0-9]/gi, "")
    .toLowerCase()
    .slice(0, 20)}_${randomUUID().slice(0, 8)}`;
  // A copy of the run's migrated template (test/support/template-database.ts) when there is one.
  const adminUrl = options.adminUrl ?? ADMIN_URL;
  const template = options.adminUrl ? undefined : process.env.TEST_TEMPLATE_DATABASE;
  const dbName = await freshDatabase(template, id, adminUrl);
  const databaseUrl = new URL(adminUrl);
  databaseUrl.pathname = `/${dbName}`;
  const toolDir = await mkdtemp(join(tmpdir(), `fleet-${id}-`));
  const env: Record<string, string> = {
    DATABASE_URL: options.viaDatabase?.(databaseUrl.toString()) ?? databaseUrl.toString(),
    REDIS_URL: redisUrl,
    FLEET_PREFIX: isClusterUrl(redisUrl) ? `{t-${id}}` : `t-${id}`,
    FLEET_TOOL_DIR: toolDir,
    LOG_LEVEL: "warn",
    METRICS_PORT: "0",
    LEASE_TTL_MS: "2000",
    SHUTDOWN_GRACE_MS: "5000",
    ...options.env,
  };
  const config = loadConfig(env);
  const database = openDatabase(databaseUrl.toString(), { max: 5 });
  // A copy of the template has every migration applied already (by migrateDatabase).
  if (!template) await migrateDatabase(database);
  // A cluster connection on a cluster (redis.ts); errors are swallowed there.
  const redis = createRedis(redisUrl, "worker");
  const apis: RunningApi[] = [];
  const workers: WorkerProcess[] = [];

  /** A `fleet <role>` child of this fleet, once its output shows `ready`. */
  async function spawnRole(
    role: "worker" | "sweeper",
    ready: RegExp,
    extraEnv: Record<string, string>,
    args: string[],
  ): Promise<WorkerProcess> {
    const child = spawn(process.execPath, [FLEET_BIN, role, ...args], {
      env: { ...process.env, ...env, ...extraEnv },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    child.stdout?.on("data", (d) => {
      out += d;
    });
    child.stderr?.on("data", (d) => {
      out += d;
    });
    const exited = new Promise<number | string>((resolve) =>
      child.on("exit", (code, signal) => resolve(signal ?? code ?? -1)),
    );
    const started = { child, output: () => out, exited };
    workers.push(started);
    // A worker needs ~1.7-3 s of CPU to be ready (measured): 2 s alone, but 12-16 s with
    // three busy loops on this 2-core machine (load 7-9), so 20 s timed out under load.
    await waitFor(() => ready.test(out) || child.exitCode !== null, 60_000, `${role} start`);
    if (child.exitCode !== null) throw new Error(`${role} exited at start:\n${out}`);
    return started;
  }

  return {
    config,
    env,
    database,
    redis,
    async startApi() {
      const api = await startApi({ ...config, logLevel: "silent" }, { port: 0 });
      apis.push(api);
      return { api, client: new FleetClient({ baseUrl: api.url }) };
    },
    spawnWorker: (extraEnv = {}, args = []) => spawnRole("worker", /fleet worker ready/, extraEnv, args),
    spawnSweeper: (extraEnv = {}) => spawnRole("sweeper", /ready/, extraEnv, []),
    async close() {
      for (const w of workers)
        if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill("SIGKILL");
      await Promise.all(workers.map((w) => w.exited));
      for (const api of apis) await api.stop();
      await database.close();
      if (!options.redisUrl) {
        // Every master of a cluster, not the one node KEYS would be routed to.
        await deleteKeys(redis, `${config.prefix}:*`);
      }
      redis.disconnect();
      await rm(toolDir, { recursive: true, force: true });
      // DROP DATABASE waits for a checkpoint (Postgres 15), which flushes every dirty page of
      // the server: ~0.3-5 s the file need not wait for. With a template, the drop goes on in
      // the background while this test process runs its next file, and the run's teardown
      // drops any copy whose drop had not ended (template-database.ts); without, it is awaited.
      const dropped = dropDatabase(dbName, adminUrl);
      if (template) inBackground(dropped);
      else await dropped;
    },
  };
}

/**
 * The next fleet's copy of the template, made while this one runs, when the test processes
 * run file after file (TEST_SPARE_COPY, vitest.config.ts): CREATE DATABASE … TEMPLATE writes
 * the whole template to the WAL and waits for its flush, ~0.5-3 s a fleet would wait for.
 */
let spare: Promise<string> | undefined;

/** A new, empty database: a copy of `template` (named after it) when there is one. */
async function freshDatabase(template: string | undefined, id: string, adminUrl: string): Promise<string> {
  if (!template) {
    await runAdmin(`create database "fleet_t_${id}"`, adminUrl);
    return `fleet_t_${id}`;
  }
  const ready = spare;
  spare = undefined;
  if (process.env.TEST_SPARE_COPY === "1") {
    spare = copyTemplate(template, `spare_${randomUUID().slice(0, 8)}`);
    // A failed spare is not used: the next fleet makes its own copy.
    spare.catch(() => {});
  }
  return (ready && (await ready.catch(() => undefined))) ?? copyTemplate(template, id);
}

/** Named after the template, so that the run's teardown finds a copy left behind. */
async function copyTemplate(template: string, id: string): Promise<string> {
  const name = copyName(template, id);
  await runAdmin(`create database "${name}" template "${template}"`);
  return name;
}

async function runAdmin(statement: string, adminUrl = ADMIN_URL): Promise<void> {
  const admin = postgres(adminUrl, { max: 1, onnotice: () => {} });
  try {
    await admin.unsafe(statement);
  } finally {
    await admin.end();
  }
}

async function dropDatabase(name: string, adminUrl = ADMIN_URL): Promise<void> {
  await runAdmin(`drop database if exists "${name}" with (force)`, adminUrl);
}

/** Work left running after a file's `close()`; a failure is printed, not thrown into the next file. */
function inBackground(work: Promise<void>): void {
  work.catch((error) => console.error("fleet-env: a background database drop failed:", error));
}

export async function waitFor(
  check: () => boolean | Promise<boolean>,
  timeoutMs: number,
  what: string,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** The worker id and metrics port a `fleet worker` child printed when it was ready. */
export function readyInfo(worker: WorkerProcess): { workerId: string; metricsPort: number } {
  const match = /fleet worker ready: (\S+), metrics on port (\d+)/.exec(worker.output());
  if (!match) throw new Error(`no ready line in worker output:\n${worker.output()}`);
  return { workerId: match[1]!, metricsPort: Number(match[2]) };
}

/** Asserts a stored history's seqs are 1..n with no gap or repeat. */
export function seqsOf(messages: { seq: number }[]): number[] {
  return messages.map((m) => m.seq);
}
