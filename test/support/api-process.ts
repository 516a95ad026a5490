/** A real `fleet api` child process of a test fleet, stopped by the signal a supervisor sends. */
import { type ChildProcess, spawn } from "node:child_process";
import { FLEET_BIN, type FleetEnv, waitFor } from "./fleet-env.js";

export type ApiProcess = {
  child: ChildProcess;
  url: string;
  port: number;
  output: () => string;
  /** The exit code (or signal), and how long after `signal()` it came (NaN: never signalled). */
  exited: Promise<{ code: number | string; afterSignalMs: number }>;
  /** Sends SIGTERM and remembers when. */
  signal: () => void;
  /** Whether `signal()` was called. */
  signalled: () => boolean;
};

/** Spawns `fleet api --port 0` with `env` added to the fleet's, once it says it is ready. */
export async function spawnApi(fleet: FleetEnv, env: Record<string, string> = {}): Promise<ApiProcess> {
  const child = spawn(process.execPath, [FLEET_BIN, "api", "--port", "0"], {
    env: { ...process.env, ...fleet.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  child.stdout.on("data", (d) => {
    out += d;
  });
  child.stderr.on("data", (d) => {
    out += d;
  });
  let signalledAt = Number.NaN;
  const exited = new Promise<{ code: number | string; afterSignalMs: number }>((resolve) =>
    child.on("exit", (code, signal) =>
      resolve({ code: signal ?? code ?? -1, afterSignalMs: Date.now() - signalledAt }),
    ),
  );
  await waitFor(() => /fleet api ready: (\S+)/.test(out) || child.exitCode !== null, 60_000, "the API ready");
  const match = /fleet api ready: (\S+)/.exec(out);
  if (!match) throw new Error(`fleet api exited at start:\n${out}`);
  const url = match[1]!;
  return {
    child,
    url,
    port: Number(new URL(url).port),
    output: () => out,
    exited,
    signal: () => {
      signalledAt = Date.now();
      child.kill("SIGTERM");
    },
    signalled: () => !Number.isNaN(signalledAt),
  };
}

/** Kills the child if it is still running (a test's `finally`). */
export function killApi(api: ApiProcess | undefined): void {
  if (api && api.child.exitCode === null && api.child.signalCode === null) api.child.kill("SIGKILL");
}
