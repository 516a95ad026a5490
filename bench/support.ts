/**
 * Shared pieces of the benchmark scripts: scratch databases, Redis key cleanup, child
 * processes that announce readiness on stdout, and small statistics helpers.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { createWriteStream, readdirSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { type ParseArgsConfig, parseArgs } from "node:util";
import type { Redis } from "ioredis";
import postgres from "postgres";
import { type FleetConfig, loadConfig } from "../src/shared/config.js";
import { openDatabase } from "../src/shared/db/client.js";
import { migrateDatabase } from "../src/shared/db/migrate.js";

export const ROOT = resolve(import.meta.dirname, "..");
export const FLEET_BIN = resolve(ROOT, "bin/fleet.js");
export const ADMIN_URL =
  process.env.BENCH_ADMIN_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
export const REDIS_URL = process.env.BENCH_REDIS_URL ?? "redis://127.0.0.1:6379";

/** A short random id for database names and Redis prefixes. */
export function shortId(): string {
  return randomUUID().replace(/-/g, "").slice(0, 10);
}

/** Creates an empty database and returns its URL. */
export async function createScratchDatabase(name: string): Promise<string> {
  const admin = postgres(ADMIN_URL, { max: 1, onnotice: () => {} });
  try {
    await admin.unsafe(`create database "${name}"`);
  } finally {
    await admin.end();
  }
  const url = new URL(ADMIN_URL);
  url.pathname = `/${name}`;
  return url.toString();
}

export async function dropScratchDatabase(name: string): Promise<void> {
  const admin = postgres(ADMIN_URL, { max: 1, onnotice: () => {} });
  try {
    await admin.unsafe(`drop database if exists "${name}" with (force)`);
  } finally {
    await admin.end();
  }
}

/** Deletes every key under `prefix:` (SCAN, never KEYS). Returns how many were deleted. */
export async function deleteRedisPrefix(redis: Redis, prefix: string): Promise<number> {
  let cursor = "0";
  let deleted = 0;
  do {
    const [next, keys] = await redis.scan(cursor, "MATCH", `${prefix}:*`, "COUNT", 1000);
    cursor = next;
    if (keys.length > 0) deleted += await redis.del(...keys);
  } while (cursor !== "0");
  return deleted;
}

export type ReadyChild = {
  child: ChildProcess;
  /** The match of the ready pattern on the child's output. */
  ready: RegExpExecArray;
  output: () => string;
  exited: Promise<number | string>;
};

/**
 * Spawns a Node process and waits until its output matches `readyPattern`. `onSpawn` sees
 * the process from its first moment (so a cleanup during the start can stop it);
 * `keepBytes` bounds the output kept.
 */
export async function spawnUntilReady(
  args: string[],
  env: Record<string, string>,
  readyPattern: RegExp,
  timeoutMs = 30_000,
  options: {
    onSpawn?: (started: Omit<ReadyChild, "ready">) => void;
    keepBytes?: number;
    /** Every byte of the child's stdout and stderr is also appended to the file this names. */
    logFile?: (pid: number | undefined) => string;
  } = {},
): Promise<ReadyChild> {
  const child = spawn(process.execPath, args, {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  if (options.logFile) {
    const file = createWriteStream(options.logFile(child.pid), { flags: "a" });
    file.on("error", () => {}); // a log that cannot be written must not end the run
    child.stdout?.on("data", (d: Buffer) => file.write(d));
    child.stderr?.on("data", (d: Buffer) => file.write(d));
    child.once("close", () => file.end());
  }
  let out = "";
  const exited = new Promise<number | string>((done) =>
    child.on("exit", (code, signal) => done(signal ?? code ?? -1)),
  );
  options.onSpawn?.({ child, output: () => out, exited });
  const ready = await new Promise<RegExpExecArray>((done, fail) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      fail(new Error(`child ${args.join(" ")} not ready after ${timeoutMs} ms:\n${out}`));
    }, timeoutMs);
    const onData = (data: Buffer) => {
      out = options.keepBytes ? (out + data).slice(-options.keepBytes) : out + data;
      const match = readyPattern.exec(out);
      if (match) {
        clearTimeout(timer);
        done(match);
      }
    };
    child.stdout?.on("data", onData);
    child.stderr?.on("data", onData);
    void exited.then((how) => {
      clearTimeout(timer);
      fail(new Error(`child ${args.join(" ")} exited (${how}) before it was ready:\n${out}`));
    });
  });
  return { child, ready, output: () => out, exited };
}

/** Spawns `fleet worker` and waits for its ready line; `workerId` is the id it announced. */
export async function spawnFleetWorker(
  env: Record<string, string>,
  nodeArgs: string[] = [],
): Promise<ReadyChild & { workerId: string }> {
  const started = await spawnUntilReady(
    [...nodeArgs, FLEET_BIN, "worker"],
    env,
    /fleet worker ready: (\S+), metrics on port \d+/,
  );
  return { ...started, workerId: started.ready[1]! };
}

/** Kills a child (SIGKILL unless told otherwise) and waits for it to exit. */
export async function stopChild(child: ReadyChild, signal: NodeJS.Signals = "SIGKILL"): Promise<void> {
  if (child.child.exitCode === null && child.child.signalCode === null) child.child.kill(signal);
  await child.exited;
}

export const sleep = (ms: number) => new Promise<void>((done) => setTimeout(done, ms));

export async function waitUntil(
  check: () => Promise<boolean> | boolean,
  timeoutMs: number,
  what: string,
  intervalMs = 25,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(intervalMs);
  }
}

/** Runs `fn` over `items` with at most `limit` calls in flight. */
export async function inPool<T, R>(items: T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = new Array(items.length);
  let next = 0;
  const lanes = Array.from({ length: Math.max(1, Math.min(limit, items.length)) }, async () => {
    for (;;) {
      const i = next++;
      if (i >= items.length) return;
      results[i] = await fn(items[i]!);
    }
  });
  await Promise.all(lanes);
  return results;
}

/** Nearest-rank percentile (p in 0..100) of unsorted samples. */
export function percentile(samples: number[], p: number): number {
  if (samples.length === 0) return Number.NaN;
  const sorted = [...samples].sort((a, b) => a - b);
  const rank = Math.max(1, Math.ceil((p / 100) * sorted.length));
  return sorted[rank - 1]!;
}

export function median(samples: number[]): number {
  return percentile(samples, 50);
}

/**
 * Cleanup steps run in reverse order of registration, once, on normal exit or on
 * SIGINT/SIGTERM; a failing step is reported and the others still run.
 */
export class Cleanup {
  private readonly steps: { what: string; run: () => Promise<unknown> }[] = [];
  private done: Promise<void> | null = null;
  private readonly onSignal = (signal: NodeJS.Signals) => {
    console.error(`\n${signal}: cleaning up`);
    void this.run().finally(() => process.exit(130));
  };

  constructor() {
    process.once("SIGINT", this.onSignal);
    process.once("SIGTERM", this.onSignal);
  }

  add(what: string, run: () => Promise<unknown>): void {
    this.steps.push({ what, run });
  }

  run(): Promise<void> {
    this.done ??= (async () => {
      process.off("SIGINT", this.onSignal);
      process.off("SIGTERM", this.onSignal);
      for (const step of [...this.steps].reverse()) {
        try {
          await step.run();
        } catch (error) {
          console.error(`cleanup: ${step.what} failed: ${(error as Error).message}`);
        }
      }
    })();
    return this.done;
  }
}

export function fmt(n: number, digits = 1): string {
  return Number.isFinite(n) ? n.toFixed(digits) : "n/a";
}

/** Left-aligned first column, right-aligned others. */
export function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => (r[c] ?? "").length)));
  return rows
    .map((r) =>
      r.map((cell, c) => (c === 0 ? cell.padEnd(widths[c]!) : cell.padStart(widths[c]!))).join("  "),
    )
    .join("\n");
}

/**
 * The tool work of benchmark session `index`, the same in the fleet and the baseline:
 * even sessions write their own file, odd ones append a line to one of four shared logs.
 */
export function benchToolCall(index: number): {
  name: "write_file" | "append_file";
  path: string;
  text: string;
} {
  return index % 2 === 0
    ? { name: "write_file", path: `written/session-${index}.txt`, text: `session ${index}\n` }
    : { name: "append_file", path: `appended-${index % 4}.log`, text: `session ${index} done` };
}

/** CPU time (user + system, in seconds) a process has used so far; 0 when it is gone. */
export function cpuSeconds(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Fields after the command name (which may hold spaces): state is field 3, utime 14, stime 15.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
  } catch {
    return 0;
  }
}

/** The machine's busy and total CPU seconds so far (all cores), from /proc/stat. */
export function machineCpu(): { busy: number; total: number } {
  const line = readFileSync("/proc/stat", "utf8").split("\n")[0]!;
  const ticks = line.trim().split(/\s+/).slice(1).map(Number);
  const total = ticks.reduce((a, b) => a + b, 0);
  const idle = (ticks[3] ?? 0) + (ticks[4] ?? 0);
  return { busy: (total - idle) / CLOCK_TICKS, total: total / CLOCK_TICKS };
}

/** Pids of processes whose command name is `comm` (e.g. redis-server). */
export function pidsByName(comm: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/comm`, "utf8").trim() === comm) pids.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

/**
 * The pid of the Redis server `redis` is connected to (`INFO server`'s process_id), so that
 * its CPU is charged and not that of every redis-server on the machine (other users' servers,
 * a test's private ones). A server in another pid namespace (a container) reports a pid this
 * machine does not know as a redis-server: then every redis-server here is taken, as before.
 */
export async function redisServerPids(redis: Redis): Promise<number[]> {
  const info = await redis.info("server");
  const pid = Number(/^process_id:(\d+)/m.exec(info)?.[1]);
  try {
    if (readFileSync(`/proc/${pid}/comm`, "utf8").trim() === "redis-server") return [pid];
  } catch {
    // not a process of this machine
  }
  return pidsByName("redis-server");
}

/** USER_HZ: 100 on Linux on every common architecture. */
const CLOCK_TICKS = 100;

/**
 * CPU used by groups of processes over a window: `start()` snapshots every candidate pid,
 * `stop(groups)` charges each group with what its pids used since (a pid born inside the
 * window is charged from zero).
 */
export class CpuWindow {
  private before = new Map<number, number>();
  private machineBefore = machineCpu();

  start(candidates: number[]): void {
    this.before = new Map(candidates.map((pid) => [pid, cpuSeconds(pid)]));
    this.machineBefore = machineCpu();
  }

  stop(groups: Record<string, number[]>): {
    groups: Record<string, number>;
    machineBusy: number;
    machineTotal: number;
  } {
    const machine = machineCpu();
    const used: Record<string, number> = {};
    for (const [name, pids] of Object.entries(groups)) {
      used[name] = pids.reduce(
        (sum, pid) => sum + Math.max(0, cpuSeconds(pid) - (this.before.get(pid) ?? 0)),
        0,
      );
    }
    return {
      groups: used,
      machineBusy: machine.busy - this.machineBefore.busy,
      machineTotal: machine.total - this.machineBefore.total,
    };
  }
}

/** Transactions and row counts of the connected database (pg_stat_database, flushed ≤ 1 s late). */
export type DbActivity = {
  xacts: number;
  fetched: number;
  inserted: number;
  updated: number;
  hotUpdated: number;
};

export async function dbActivity(sql: postgres.Sql): Promise<DbActivity> {
  const [row] = await sql<DbActivity[]>`
    select (xact_commit + xact_rollback)::float8 as xacts, tup_fetched::float8 as fetched,
           tup_inserted::float8 as inserted, tup_updated::float8 as updated,
           (select coalesce(sum(n_tup_hot_upd), 0) from pg_stat_user_tables)::float8 as "hotUpdated"
      from pg_stat_database where datname = current_database()`;
  return row!;
}

/** Commands Redis has processed so far (the whole server). */
export async function redisCommands(redis: Redis): Promise<number> {
  const info = await redis.info("stats");
  return Number(/total_commands_processed:(\d+)/.exec(info)?.[1] ?? Number.NaN);
}

/** The Redis list where bench/bullmq-sleeper.ts records each processor start (JSON). */
export function sleeperStartsKey(prefix: string): string {
  return `${prefix}:bench-starts`;
}

/**
 * A scratch fleet for one benchmark phase: its own migrated database, FLEET_PREFIX and
 * tool directory, all removed by `cleanup`; `env` is what its worker processes get.
 */
export async function scratchFleet(
  cleanup: Cleanup,
  redis: Redis,
  tag: string,
  workerConcurrency: number,
  /** What the database's name and the prefix start with (default `fleet_bench`, `bench`). */
  names: { database: string; prefix: string } = { database: "fleet_bench", prefix: "bench" },
): Promise<{ databaseUrl: string; env: Record<string, string>; config: FleetConfig }> {
  const id = shortId();
  const dbName = `${names.database}_${tag}_${id}`;
  const databaseUrl = await createScratchDatabase(dbName);
  cleanup.add(`drop database ${dbName}`, () => dropScratchDatabase(dbName));
  const prefix = `${names.prefix}-${tag}-${id}`;
  cleanup.add(`delete Redis keys ${prefix}:*`, () => deleteRedisPrefix(redis, prefix));
  const toolDir = await mkdtemp(join(tmpdir(), `fleet-bench-${tag}-`));
  cleanup.add(`remove ${toolDir}`, () => rm(toolDir, { recursive: true, force: true }));
  const env: Record<string, string> = {
    DATABASE_URL: databaseUrl,
    REDIS_URL,
    FLEET_PREFIX: prefix,
    FLEET_TOOL_DIR: toolDir,
    LOG_LEVEL: "warn",
    METRICS_PORT: "0",
    WORKER_CONCURRENCY: String(workerConcurrency),
  };
  const migrator = openDatabase(databaseUrl, { max: 2 });
  try {
    await migrateDatabase(migrator);
  } finally {
    await migrator.close();
  }
  return { databaseUrl, env, config: { ...loadConfig(env), logLevel: "silent" } };
}

/** Stops a benchmark whose command line is wrong: one line naming the problem, exit code 2. */
export function usage(message: string): never {
  const script = process.argv[1]?.replace(/^.*\//, "") ?? "bench";
  console.error(`${script}: ${message}`);
  process.exit(2);
}

/** Parses a benchmark's options (`() => parseArgs(…)`): an unknown or malformed one stops it through `usage`. */
export function parsed<T>(parse: () => T): T {
  try {
    return parse();
  } catch (error) {
    return usage((error as Error).message);
  }
}

/** The values of the bench's `--options` (each with its default); an unknown or malformed one stops through `usage`. */
export function benchOptions<const O extends NonNullable<ParseArgsConfig["options"]>>(options: O) {
  return parsed(() => parseArgs({ options })).values;
}

/** A command-line value that must be a whole number ≥ `min`; stops through `usage` naming `--name` otherwise. */
export function wholeNumber(name: string, value: string | undefined, min = 1): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < min) usage(`--${name} must be a whole number ≥ ${min}`);
  return n;
}

/** A command-line value that must be one of `allowed`; stops through `usage` otherwise. */
export function oneOf(name: string, value: string | undefined, allowed: string[]): string {
  if (!value || !allowed.includes(value)) usage(`--${name} must be one of ${allowed.join(", ")}`);
  return value;
}
