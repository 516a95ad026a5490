/**
 * `fleet migrate`, `fleet api`, `fleet worker`, `fleet sweeper`: long-lived roles with
 * graceful SIGTERM. Each role checks, before it says "ready", that its database is reachable
 * and migrated, that Redis answers and that its port is free; when one is not, it exits 2
 * with one line naming the cause.
 *
 * Each role imports its own code (API, worker, sweeper) only when it starts: a static import
 * of all three made every `fleet worker`, `fleet sweeper` and `fleet migrate`, and every one
 * refused at its checks, load fastify, bull-board and BullMQ first (~1 s of CPU per start).
 */
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { type FleetConfig, loadConfig } from "../shared/config.js";
import { ensureDatabase, openDatabase } from "../shared/db/client.js";
import { type MigrateResult, migrateDatabase } from "../shared/db/migrate.js";
import { privilegeRefusal } from "../shared/db/privilege-refusal.js";
import {
  checkPostgres,
  checkRedis,
  checkRoleServices,
  checkToolDir,
  checkTranscriptDir,
} from "../shared/preflight.js";
import { exitDeadlineMs } from "../shared/shutdown.js";
import { guardCleanExit } from "../worker/exit-guard.js";
import { startLoopWatchdog } from "../worker/loop-watchdog.js";
import { checkWorkerOptions } from "../worker/plugin-checks.js";
import { loadExtensions, loadTools } from "./plugin-modules.js";

/** The package's `bin/fleet.js`, found from the sources (src/commands) or a build (dist/src/commands). */
function findFleetBin(): string {
  let dir = import.meta.dirname;
  for (let i = 0; i < 5; i++) {
    const candidate = join(dir, "bin", "fleet.js");
    if (existsSync(candidate)) return candidate;
    dir = dirname(dir);
  }
  return resolve(import.meta.dirname, "../../bin/fleet.js");
}

export const FLEET_BIN = findFleetBin();

/**
 * Resolves when SIGTERM, SIGINT or SIGHUP arrives, or when the `fleet up` (or `fleet demo`)
 * that started this process is gone (its IPC channel closes): a supervisor that died must not
 * leave its children running. SIGHUP is a terminal that closed (an ssh session dropped): with
 * no listener, Node ended the role at once, its running work left to crash recovery.
 */
export function untilSignal(): Promise<NodeJS.Signals | "disconnect"> {
  return new Promise((resolve) => {
    const on = (signal: NodeJS.Signals | "disconnect") => {
      process.off("SIGTERM", on);
      process.off("SIGINT", on);
      process.off("SIGHUP", on);
      process.off("disconnect", onDisconnect);
      resolve(signal);
    };
    const onDisconnect = () => on("disconnect");
    process.on("SIGTERM", on);
    process.on("SIGINT", on);
    process.on("SIGHUP", on);
    if (process.connected) process.on("disconnect", onDisconnect);
  });
}

/**
 * Prints a role's ready line, then waits for its stop signal (untilSignal). It listens before
 * it prints: whoever reads the line may send SIGTERM at once, and a signal that came before
 * the listener would kill the process with no graceful stop.
 */
async function readyUntilSignal(line: string): Promise<void> {
  const signal = untilSignal();
  console.log(line);
  await signal;
}

/**
 * Runs a role's stop after SIGTERM, and ends the wait after `ms`: a close that hangs (one
 * waiting on a Redis that is gone, say) must not keep a stopped process alive. It fails with
 * one line, and `fleet` exits 1; a stop that ends says `fleet ROLE stopped`.
 */
export async function stopWithin(role: string, stop: () => Promise<void>, ms: number): Promise<number> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<"late">((resolve) => {
    timer = setTimeout(() => resolve("late"), ms);
  });
  const outcome = await ignoringSigterm(role, ms, () =>
    Promise.race([stop().then(() => "stopped" as const), late]),
  );
  clearTimeout(timer);
  if (outcome === "late")
    throw new Error(
      `${role} not stopped ${(ms / 1000).toFixed(0)} s after the signal (waiting on Redis or Postgres: unreachable, or a statement still running there); exiting anyway`,
    );
  // The last line, as `ready` was the first: the API's and the sweeper's last line was their
  // start's, the same whether they stopped or were killed.
  console.log(`fleet ${role} stopped`);
  return 0;
}

/**
 * Runs a stop with SIGTERM ignored (said once on stderr): systemd's default KillMode sends it
 * to every process of the unit, so a child of `fleet up` gets it from systemd and again from
 * `fleet up`, and Node's default for a SIGTERM with no listener ended the stop at once. The
 * stop ends by itself within `ms`; SIGINT (a second Ctrl-C) and SIGKILL still end it at once.
 */
export async function ignoringSigterm<T>(role: string, ms: number, stop: () => Promise<T>): Promise<T> {
  let said = false;
  // SIGHUP too: a closing terminal sends it to every process of its session, more than once.
  const ignore = (signal: NodeJS.Signals) => {
    if (said) return;
    said = true;
    console.error(
      `fleet ${role}: already stopping; ${signal} ignored (the stop ends within ${(ms / 1000).toFixed(0)} s; SIGINT or SIGKILL end it now)`,
    );
  };
  process.on("SIGTERM", ignore);
  process.on("SIGHUP", ignore);
  try {
    return await stop();
  } finally {
    process.off("SIGTERM", ignore);
    process.off("SIGHUP", ignore);
  }
}

/**
 * Creates DATABASE_URL's database if it is missing and applies the migrations, once Postgres
 * answers (its `postgres` database: ours may not exist yet). Migrating touches nothing in
 * Redis: only `withRedis` (`fleet up`, `fleet demo`, which go on to run the roles) checks that
 * Redis answers too, before anything is applied. `fleet migrate` asked for Redis as well, and
 * refused to migrate while it was down.
 */
export async function migrate(
  config: FleetConfig,
  options: { withRedis?: boolean } = {},
): Promise<MigrateResult> {
  await checkPostgres(config.databaseUrl, "postgres", config.preflightTimeoutMs);
  if (options.withRedis) await checkRedis(config.redisUrl, config.preflightTimeoutMs);
  // A user that may not create the database or its tables is told what to grant (privilege-refusal.ts).
  await ensureDatabase(config.databaseUrl).catch((error: unknown) => {
    throw privilegeRefusal(config.databaseUrl, "create", error) ?? error;
  });
  const database = openDatabase(config.databaseUrl, { max: 2 });
  try {
    return await migrateDatabase(database, {
      lockTimeoutMs: config.migrateLockTimeoutMs,
      onWait: (line) => console.error(`fleet migrate: ${line}`),
    });
  } catch (error) {
    throw privilegeRefusal(config.databaseUrl, "migrate", error) ?? error;
  } finally {
    await database.close();
  }
}

export async function migrateCommand(): Promise<number> {
  const { newerThanOurs } = await migrate(loadConfig());
  // Drizzle applies only what is newer than the newest recorded: a newer release's database
  // gets nothing of this one, which is not "applied" (a rollback of the code keeps the schema).
  console.log(
    newerThanOurs
      ? `no migration applied: the database was ${newerThanOurs}; its schema stays the newer release's`
      : "migrations applied",
  );
  return 0;
}

/**
 * One line on stderr when a newer release migrated the database (checkDatabase): this process
 * runs on it, as the older processes of a rolling upgrade do, but an operator should know.
 */
function sayNewerSchema(role: string, database: { newerThanOurs: string | null }): void {
  if (database.newerThanOurs)
    console.error(
      `fleet ${role}: the database was ${database.newerThanOurs}: this process is of an older release; ` +
        "fine while a rolling upgrade replaces it (see Upgrading in the README), else upgrade it",
    );
}

export type ApiOptions = {
  /** Listen here instead of PORT. */
  port?: number;
};

export async function apiCommand(options: ApiOptions = {}): Promise<number> {
  const config = loadConfig();
  sayNewerSchema("api", await checkRoleServices(config));
  const { startApi } = await import("../producer/api-server.js");
  const api = await startApi(config, { port: options.port });
  await readyUntilSignal(`fleet api ready: ${api.url}`);
  // The drain: served on with /healthz at 503, so that a load balancer (or Kubernetes, which
  // takes a pod out of its Service while it sends SIGTERM) stops sending before the port closes.
  const drainMs = config.apiDrainMs;
  const stop = async () => {
    api.drain();
    if (drainMs > 0) {
      console.error(`fleet api: draining for ${drainMs} ms (/healthz answers 503), then stopping`);
      await new Promise((resolve) => setTimeout(resolve, drainMs));
    }
    await api.stop();
  };
  return stopWithin("api", stop, drainMs + exitDeadlineMs("api", 0));
}

export type WorkerCommandOptions = {
  /** Modules whose default export is more tools. */
  tools?: string[];
  /** Serve /metrics and /healthz here instead of METRICS_PORT. */
  metricsPort?: number;
  /** Modules whose default export is one extension or an array of them (contracts §8). */
  extensions?: string[];
};

export async function workerCommand(options: WorkerCommandOptions = {}): Promise<number> {
  const config = loadConfig();
  if (options.metricsPort !== undefined) config.metricsPort = options.metricsPort;
  // Before the operator's modules load: one that blocks at its import, or exits 0, is caught
  // too. The watchdog is never stopped: it ends with the process (cli.ts exits a worker once
  // its stop has ended); the exit guard ends when the stop begins.
  const endExitGuard = guardCleanExit("worker");
  startLoopWatchdog({
    blockedMs: config.workerBlockedExitMs,
    role: "worker",
    variable: "FLEET_WORKER_BLOCKED_EXIT_MS",
    onError: (error) =>
      console.error(`fleet worker: the event loop's watchdog failed, none now: ${error.message}`),
  });
  const tools = (await Promise.all((options.tools ?? []).map(loadTools))).flat();
  const extensions = (await Promise.all((options.extensions ?? []).map(loadExtensions))).flat();
  // Across the modules too (a tool name in two of them), before Postgres and Redis are asked.
  checkWorkerOptions({ tools, extensions }, config, (option) => `--${option}`);
  sayNewerSchema("worker", await checkRoleServices(config));
  await checkToolDir(config.toolDir);
  if (config.transcriptDir) await checkTranscriptDir(config.transcriptDir);
  const { startWorker } = await import("../worker/worker.js");
  const worker = await startWorker(config, { tools, extensions });
  await readyUntilSignal(`fleet worker ready: ${worker.workerId}, metrics on port ${worker.metricsPort}`);
  endExitGuard();
  return stopWithin("worker", worker.stop, exitDeadlineMs("worker", config.shutdownGraceMs));
}

export async function sweeperCommand(options: { metricsPort?: number } = {}): Promise<number> {
  const config = loadConfig();
  if (options.metricsPort !== undefined) config.metricsPort = options.metricsPort;
  sayNewerSchema("sweeper", await checkRoleServices(config));
  const { startSweeper } = await import("../sweeper/sweeper-process.js");
  const sweeper = await startSweeper(config);
  await readyUntilSignal(`fleet sweeper ready: metrics on port ${sweeper.metricsPort}`);
  return stopWithin("sweeper", sweeper.stop, exitDeadlineMs("sweeper", 0));
}

/** Resolves with the worker id once a spawned `fleet worker` (stdout piped) says it is ready. */
export function workerReady(child: ChildProcess): Promise<string> {
  return new Promise((resolve, reject) => {
    let out = "";
    child.stdout?.on("data", (chunk) => {
      out += chunk;
      const match = /fleet worker ready: (\S+),/.exec(out);
      if (match) resolve(match[1]!);
    });
    child.once("exit", (code) => reject(new Error(`worker exited (${code}) before it was ready`)));
  });
}

/**
 * Spawns `fleet <role>` as a child process with the given environment additions. The child
 * gets a process group of its own (a Ctrl-C in the terminal reaches only the parent, which
 * stops its children in order) and an IPC channel, whose closing tells it that its parent
 * is gone.
 */
export function spawnRole(
  role: string,
  env: Record<string, string>,
  args: string[] = [],
  stdout: "inherit" | "ignore" | "pipe" = "inherit",
): ChildProcess {
  return spawn(process.execPath, [FLEET_BIN, role, ...args], {
    env: { ...process.env, ...env },
    stdio: ["ignore", stdout, "inherit", "ipc"],
    detached: true,
  });
}
