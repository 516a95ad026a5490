/**
 * Real Redis servers started by a test: a 3-master Redis Cluster (`redis-server
 * --cluster-enabled yes` ×3 + `redis-cli --cluster create`) or one private server with extra
 * options (e.g. `--rename-command CLIENT ""`, a Redis that refuses CLIENT LIST). Each lives in
 * a temp directory on free ports, saves nothing, and `stop()` ends exactly the processes it
 * started and removes the directory.
 */
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);

export type RedisHandle = {
  /** A REDIS_URL for it: `redis+cluster://…` for a cluster. */
  url: string;
  ports: number[];
  /** Sends a signal to the server on `port` (SIGKILL: a master dies; SIGSTOP/SIGCONT: frozen). */
  signal(port: number, signal: NodeJS.Signals): void;
  stop(): Promise<void>;
};

function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once("error", () => resolve(false));
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
  });
}

/**
 * Where ports are drawn from: TEST_REDIS_PORTS=`from-to` (e.g. `7500-7599`, for runs that must
 * keep to a range of their own), else 20000–54999.
 */
function portRange(): [number, number] {
  const match = /^(\d+)-(\d+)$/.exec(process.env.TEST_REDIS_PORTS ?? "");
  return match ? [Number(match[1]), Number(match[2])] : [20_000, 54_999];
}

/** A free port whose cluster bus port (+10000) is free too. */
export async function freePort(taken: Set<number>): Promise<number> {
  const [from, to] = portRange();
  for (let tries = 0; tries < 200; tries++) {
    const port = from + Math.floor(Math.random() * (to - from + 1));
    if (taken.has(port) || taken.has(port + 10_000)) continue;
    if ((await bindable(port)) && (await bindable(port + 10_000))) {
      taken.add(port);
      taken.add(port + 10_000);
      return port;
    }
  }
  throw new Error("no free port pair for redis-server");
}

async function cli(port: number, ...args: string[]): Promise<string> {
  const { stdout } = await run("redis-cli", ["-h", "127.0.0.1", "-p", String(port), ...args], {
    timeout: 10_000,
  });
  return stdout;
}

async function until(check: () => Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check().catch(() => false)) return;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function startServers(
  count: number,
  extraArgs: (port: number, dir: string) => string[],
): Promise<{ dir: string; ports: number[]; signal: RedisHandle["signal"]; stop(): Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), "fleet-redis-"));
  const taken = new Set<number>();
  const children: ChildProcess[] = [];
  const stop = async () => {
    await Promise.all(
      children.map(
        (child) =>
          new Promise<void>((resolve) => {
            if (child.exitCode !== null || child.signalCode !== null) return resolve();
            child.once("exit", () => resolve());
            child.kill("SIGCONT");
            child.kill("SIGKILL");
          }),
      ),
    );
    await rm(dir, { recursive: true, force: true });
  };
  try {
    const ports: number[] = [];
    for (let i = 0; i < count; i++) ports.push(await freePort(taken));
    for (const port of ports) {
      const child = spawn(
        "redis-server",
        [
          "--port",
          String(port),
          "--bind",
          "127.0.0.1",
          "--dir",
          dir,
          "--save",
          "",
          "--appendonly",
          "no",
          "--logfile",
          join(dir, `${port}.log`),
          ...extraArgs(port, dir),
        ],
        { stdio: "ignore" },
      );
      children.push(child);
    }
    await Promise.all(
      ports.map((port) =>
        until(async () => /PONG/.test(await cli(port, "ping")), 10_000, `redis on ${port}`),
      ),
    );
    const signal = (port: number, name: NodeJS.Signals) => {
      children[ports.indexOf(port)]?.kill(name);
    };
    return { dir, ports, signal, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}

/**
 * A Redis Cluster of `masters` masters with `replicas` replicas each, ready: `cluster_state:ok`
 * on every node and every replica's link to its master up (so a failover can promote it).
 */
export async function startRedisCluster(masters = 3, replicas = 0): Promise<RedisHandle> {
  const servers = await startServers(masters * (1 + replicas), (port, dir) => [
    "--cluster-enabled",
    "yes",
    "--cluster-config-file",
    join(dir, `nodes-${port}.conf`),
    "--cluster-node-timeout",
    "2000",
  ]);
  try {
    await run(
      "redis-cli",
      [
        "--cluster",
        "create",
        ...servers.ports.map((p) => `127.0.0.1:${p}`),
        "--cluster-replicas",
        String(replicas),
        "--cluster-yes",
      ],
      { timeout: 30_000 },
    );
    await Promise.all(
      servers.ports.map((port) =>
        until(
          async () => /cluster_state:ok/.test(await cli(port, "cluster", "info")),
          20_000,
          `cluster_state:ok on ${port}`,
        ),
      ),
    );
    await Promise.all(
      servers.ports.map((port) =>
        until(
          async () => {
            const info = await cli(port, "info", "replication");
            return /role:master/.test(info) || /master_link_status:up/.test(info);
          },
          20_000,
          `replica on ${port} in sync`,
        ),
      ),
    );
  } catch (error) {
    await servers.stop();
    throw error;
  }
  return {
    url: `redis+cluster://${servers.ports.map((p) => `127.0.0.1:${p}`).join(",")}`,
    ports: servers.ports,
    signal: servers.signal,
    stop: servers.stop,
  };
}

/** One private Redis with extra server options, e.g. `["--rename-command", "CLIENT", ""]`. */
export async function startRedisServer(options: string[] = []): Promise<RedisHandle> {
  const servers = await startServers(1, () => options);
  return {
    url: `redis://127.0.0.1:${servers.ports[0]}`,
    ports: servers.ports,
    signal: servers.signal,
    stop: servers.stop,
  };
}

let shared: RedisHandle | undefined;

/**
 * vitest globalSetup of `npm run test:cluster` (vitest.cluster.config.ts): one 3-master
 * cluster for the run, handed to every test file as TEST_REDIS_URL (test/support/fleet-env.ts
 * reads it; the forked test processes inherit the variable).
 */
export async function setup(): Promise<void> {
  shared = await startRedisCluster(3);
  process.env.TEST_REDIS_URL = shared.url;
}

export async function teardown(): Promise<void> {
  await shared?.stop();
}
