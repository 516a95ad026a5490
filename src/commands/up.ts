/**
 * `fleet up`: the whole fleet on this machine. Migrates, then runs the API, the sweeper and
 * N workers each as a child process of its own (supervisor.ts restarts one that crashes),
 * and stops them all gracefully on SIGTERM or SIGINT.
 */
import { resolve } from "node:path";
import { loadConfig } from "../shared/config.js";
import { ValidationError } from "../shared/errors.js";
import { supervisorStopMs } from "../shared/shutdown.js";
import { checkModuleFile } from "./plugin-modules.js";
import { ignoringSigterm, migrate, untilSignal } from "./serve.js";
import { type ChildSpec, StartFailedError, Supervisor } from "./supervisor.js";

export type UpOptions = {
  /** Worker processes. */
  workers: number;
  /** Modules of more tools, given to every worker. */
  tools?: string[];
  /** Extension modules (contracts §8), given to every worker. */
  extensions?: string[];
  /**
   * Worker i (from 0) serves /metrics on this port + i, the sweeper on this port + workers.
   * Default: METRICS_PORT when it is set (not 0); otherwise, and for 0, each picks a free port.
   */
  metricsPortBase?: number;
};

/**
 * The children of `fleet up`: the API, the sweeper, and the workers, with their metrics ports.
 * A base of 0 means free ports, as METRICS_PORT=0 does (not ports 0, 1, 2, …: privileged).
 */
export function upChildren(options: UpOptions, metricsPortBase: number | undefined): ChildSpec[] {
  const port = (offset: number) => String(metricsPortBase ? metricsPortBase + offset : 0);
  const toolArgs = [
    ...(options.tools ?? []).flatMap((file) => ["--tools", resolve(file)]),
    ...(options.extensions ?? []).flatMap((file) => ["--extensions", resolve(file)]),
  ];
  return [
    { name: "api", role: "api", args: [] },
    { name: "sweeper", role: "sweeper", args: ["--metrics-port", port(options.workers)] },
    ...Array.from(
      { length: options.workers },
      (_, i): ChildSpec => ({
        name: `worker ${i}`,
        role: "worker",
        args: [...toolArgs, "--metrics-port", port(i)],
      }),
    ),
  ];
}

export async function upCommand(options: UpOptions): Promise<number> {
  const config = loadConfig();
  for (const file of options.tools ?? []) checkModuleFile(file, "--tools");
  for (const file of options.extensions ?? []) checkModuleFile(file, "--extensions");
  const base = options.metricsPortBase ?? (config.metricsPort > 0 ? config.metricsPort : undefined);
  if (base !== undefined && base + options.workers > 65_535)
    throw new ValidationError(
      "--metrics-port-base",
      `${base} + ${options.workers} workers is past port 65535`,
    );
  await migrate(config, { withRedis: true });

  const signal = untilSignal();
  const supervisor = new Supervisor();
  const children = upChildren(options, base);
  for (const spec of children) supervisor.start(spec);
  // A child still running past its own exit deadline (its stop's bound and more) is killed.
  const stopMs = supervisorStopMs(config.shutdownGraceMs, config.apiDrainMs);
  const stopAll = () => ignoringSigterm("up", stopMs, () => supervisor.stop(stopMs));

  const started = await Promise.race([supervisor.started(), signal.then(() => "signal" as const)]).catch(
    (error: unknown) => error,
  );
  if (started === "signal") {
    await stopAll();
    return 0;
  }
  if (started instanceof StartFailedError) {
    console.error(`fleet up: ${started.message}; stopping the others`);
    await stopAll();
    return started.exit.code && started.exit.code > 0 ? started.exit.code : 1;
  }
  if (!(started instanceof Map)) throw started;

  const metricsPort = (name: string) => /metrics on port (\d+)/.exec(started.get(name) ?? "")?.[1] ?? "?";
  const workers = children.filter((c) => c.role === "worker").map((c) => metricsPort(c.name));
  console.log(
    `fleet up: API on ${started.get("api")}, ${options.workers} worker process${options.workers === 1 ? "" : "es"}, a sweeper ` +
      `(metrics: workers on ports ${workers.join(", ")}; sweeper on port ${metricsPort("sweeper")})`,
  );
  await signal;
  console.log("fleet up: stopping");
  await stopAll();
  console.log("fleet up: stopped");
  return 0;
}
