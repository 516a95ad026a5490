/**
 * A Redis server of a test's own, on a free port, that the test may stop and start again
 * (empty: no persistence) without disturbing any other test.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Redis } from "ioredis";
import { afterAll, beforeAll } from "vitest";

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

/** Calls per command since the last RESETSTAT, commands run inside scripts included. */
export async function commandCalls(redis: Redis): Promise<Record<string, number>> {
  const calls: Record<string, number> = {};
  for (const [, name, count] of (await redis.info("commandstats")).matchAll(/cmdstat_(\S+):calls=(\d+)/g))
    calls[name!] = Number(count);
  return calls;
}

/**
 * A Redis server of the file's own for its tests, started in `beforeAll` with a client on it
 * (`redis`), both stopped in `afterAll`.
 */
export function ownRedisForFile(): { readonly redis: Redis } {
  const held = {} as { redis: Redis; server: ChildProcess };
  beforeAll(async () => {
    const port = await freePort();
    held.server = await startRedis(port);
    held.redis = new Redis({ port, maxRetriesPerRequest: 1 });
  }, 30_000);
  afterAll(async () => {
    held.redis?.disconnect();
    if (held.server) await stopRedis(held.server);
  });
  return held;
}
