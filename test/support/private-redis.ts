/**
 * A Redis server of a test's own, on a free port, that the test may stop and start again
 * (empty: no persistence) without disturbing any other test.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

export async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const server = createServer();
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => resolve(typeof address === "object" && address ? address.port : 0));
    });
  });
}

/**
 * Starts `redis-server` on `port` with `args` added; resolves once it accepts connections.
 * Its directory is a temporary one: a replica's full sync writes dump.rdb there whatever
 * `--save` says, and in the working directory it landed in the repository.
 */
export function startRedis(port: number, args: string[] = []): Promise<ChildProcess> {
  const dir = ["--dir", mkdtempSync(join(tmpdir(), "fleet-redis-"))];
  const child = spawn(
    "redis-server",
    ["--port", String(port), "--bind", "127.0.0.1", ...dir, "--save", "", "--appendonly", "no", ...args],
    { stdio: ["ignore", "pipe", "ignore"] },
  );
  return new Promise((resolve, reject) => {
    let out = "";
    child.stdout?.on("data", (d) => {
      out += d;
      if (out.includes("Ready to accept connections")) resolve(child);
    });
    child.on("exit", (code) => reject(new Error(`redis-server exited ${code}: ${out}`)));
  });
}

export function stopRedis(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once("exit", () => resolve());
    child.kill("SIGKILL");
  });
}
