/** `fleet migrate`, `fleet api`, `fleet worker`, `fleet up`: long-lived roles with graceful SIGTERM. */
import { type ChildProcess, spawn } from "node:child_process";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { startApi } from "../producer/api-server.js";
import { type FleetConfig, loadConfig } from "../shared/config.js";
import { ensureDatabase, openDatabase } from "../shared/db/client.js";
import { migrateDatabase } from "../shared/db/migrate.js";
import { ValidationError } from "../shared/errors.js";
import { checkServices } from "../shared/preflight.js";
import { startSweeper } from "../sweeper/sweeper-process.js";
import type { Tool } from "../worker/tools/registry.js";
import { startWorker } from "../worker/worker.js";

export const FLEET_BIN = resolve(import.meta.dirname, "../../bin/fleet.js");

/** Resolves when SIGTERM or SIGINT arrives. */
export function untilSignal(): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    const on = (signal: NodeJS.Signals) => {
      process.off("SIGTERM", on);
      process.off("SIGINT", on);
      resolve(signal);
    };
    process.on("SIGTERM", on);
    process.on("SIGINT", on);
  });
}

export async function migrate(config: FleetConfig): Promise<void> {
  await checkServices(config);
  await ensureDatabase(config.databaseUrl);
  const database = openDatabase(config.databaseUrl, { max: 2 });
  try {
    await migrateDatabase(database);
  } finally {
    await database.close();
  }
}

export async function migrateCommand(): Promise<number> {
  await migrate(loadConfig());
  console.log("migrations applied");
  return 0;
}

export async function apiCommand(args: string[]): Promise<number> {
  const { values } = parseArgs({ args, options: { port: { type: "string" } } });
  const config = loadConfig();
  const api = await startApi(config, { port: values.port ? Number(values.port) : undefined });
  console.log(`fleet api ready: ${api.url}`);
  await untilSignal();
  await api.stop();
  return 0;
}

/** Loads user tools: a module whose default export is a Tool or an array of them. */
export async function loadTools(file: string): Promise<Tool[]> {
  const module = await import(pathToFileURL(resolve(file)).href);
  const exported = module.default ?? module.tools;
  const tools = Array.isArray(exported) ? exported : exported ? [exported] : [];
  if (tools.length === 0)
    throw new ValidationError("--tools", `${file} exports no tools (export default [tool, ...])`);
  return tools as Tool[];
}

export async function workerCommand(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    options: { tools: { type: "string", multiple: true }, "metrics-port": { type: "string" } },
  });
  const config = loadConfig();
  if (values["metrics-port"]) config.metricsPort = Number(values["metrics-port"]);
  const tools = (await Promise.all((values.tools ?? []).map(loadTools))).flat();
  const worker = await startWorker(config, { tools });
  console.log(`fleet worker ready: ${worker.workerId}, metrics on port ${worker.metricsPort}`);
  await untilSignal();
  await worker.stop();
  return 0;
}

export async function sweeperCommand(args: string[]): Promise<number> {
  const { values } = parseArgs({ args, options: { "metrics-port": { type: "string" } } });
  const config = loadConfig();
  if (values["metrics-port"]) config.metricsPort = Number(values["metrics-port"]);
  const sweeper = await startSweeper(config);
  console.log(`fleet sweeper ready: metrics on port ${sweeper.metricsPort}`);
  await untilSignal();
  await sweeper.stop();
  return 0;
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

/** Spawns `fleet <role>` as a child process with the given environment additions. */
export function spawnRole(
  role: string,
  env: Record<string, string>,
  args: string[] = [],
  stdout: "inherit" | "ignore" | "pipe" = "inherit",
): ChildProcess {
  return spawn(process.execPath, [FLEET_BIN, role, ...args], {
    env: { ...process.env, ...env },
    stdio: ["ignore", stdout, "inherit"],
  });
}

export async function upCommand(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    options: { workers: { type: "string", default: "2" }, tools: { type: "string", multiple: true } },
  });
  const toolArgs = (values.tools ?? []).flatMap((file) => ["--tools", resolve(file)]);
  const count = Number(values.workers);
  if (!Number.isInteger(count) || count < 1)
    throw new ValidationError("--workers", "must be a whole number ≥ 1");
  const config = loadConfig();
  await migrate(config);
  const api = await startApi(config);
  const sweeper = await startSweeper(config);
  console.log(
    `fleet up: API on ${api.url}, ${count} worker processes, a sweeper (metrics on port ${sweeper.metricsPort})`,
  );
  let stopping = false;
  const children = new Set<ChildProcess>();
  const startOne = () => {
    const child = spawnRole("worker", {}, toolArgs);
    children.add(child);
    child.on("exit", (code, signal) => {
      children.delete(child);
      if (stopping) return;
      console.error(`fleet up: a worker exited (${signal ?? code}); starting another`);
      setTimeout(startOne, 1_000).unref();
    });
  };
  for (let i = 0; i < count; i++) startOne();
  await untilSignal();
  stopping = true;
  await Promise.all(
    [...children].map(
      (child) =>
        new Promise<void>((resolve) => {
          child.once("exit", () => resolve());
          child.kill("SIGTERM");
        }),
    ),
  );
  await sweeper.stop();
  await api.stop();
  return 0;
}
