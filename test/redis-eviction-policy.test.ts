/**
 * A Redis whose maxmemory-policy may evict keys (`allkeys-lru`) can drop the fleet's leases,
 * queued jobs and events. Every role (API, worker, sweeper) reads the policy when it starts,
 * logs one warning naming it, and exports `fleet_redis_eviction_policy_safe` (0 there, 1 on
 * `noeviction`, -1 when Redis refuses both CONFIG and INFO); it reads it again every
 * FLEET_EVICTION_CHECK_MS, so a policy changed on the running Redis shows without a restart.
 * Real processes, on Redis servers of this file's own.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { createServer } from "node:net";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import {
  evictionVerdict,
  policyFromInfo,
  reportEvictionPolicy,
  watchEvictionPolicy,
} from "../src/shared/eviction-policy.js";
import { startSweeper } from "../src/sweeper/sweeper-process.js";
import { startWorker } from "../src/worker/worker.js";
import { createFleetEnv, FLEET_BIN, type FleetEnv, readyInfo, waitFor } from "./support/fleet-env.js";
import { freePort, startRedis, stopRedis } from "./support/private-redis.js";

const WARNING = /Redis maxmemory-policy is allkeys-lru, not noeviction: .*leases, queued jobs/;

async function gauge(port: number): Promise<string | undefined> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  return /^fleet_redis_eviction_policy_safe\{[^}]*\} (-?\d+)$/m.exec(text)?.[1];
}

describe("the eviction policy verdict (pure)", () => {
  it("only noeviction is safe; volatile-* is not (leases and heartbeats have a TTL)", () => {
    expect(evictionVerdict({ policies: ["noeviction"] })).toEqual({ safe: 1, policy: "noeviction" });
    expect(evictionVerdict({ policies: ["noeviction", "noeviction"] }).safe).toBe(1);
    for (const policy of ["allkeys-lru", "volatile-ttl", "volatile-lru", "allkeys-random"]) {
      const verdict = evictionVerdict({ policies: [policy] });
      expect(verdict).toMatchObject({ safe: 0, policy });
    }
    // A cluster with one master of another policy: unsafe, naming it.
    expect(evictionVerdict({ policies: ["noeviction", "allkeys-lfu"] })).toMatchObject({
      safe: 0,
      policy: "allkeys-lfu",
    });
    expect(evictionVerdict({ refused: "NOPERM" })).toMatchObject({ safe: -1 });
    expect(policyFromInfo("# Memory\r\nused_memory:1\r\nmaxmemory_policy:volatile-lru\r\n")).toBe(
      "volatile-lru",
    );
    expect(policyFromInfo("# Memory\r\n")).toBeUndefined();
  });
});

describe("roles on a Redis with maxmemory-policy allkeys-lru", () => {
  let fleet: FleetEnv;
  let server: ChildProcess;
  let admin: Redis;
  let port: number;
  const children: ChildProcess[] = [];

  beforeAll(async () => {
    port = await freePort();
    server = await startRedis(port, ["--maxmemory-policy", "allkeys-lru"]);
    admin = new Redis(port, "127.0.0.1");
    fleet = await createFleetEnv("evictionpolicy", { redisUrl: `redis://127.0.0.1:${port}` });
  });
  afterAll(async () => {
    for (const child of children) if (child.exitCode === null) child.kill("SIGKILL");
    await fleet?.close();
    admin?.disconnect();
    if (server) await stopRedis(server);
  });

  /** `fleet api` as a child (its log is what a user reads), once it is ready. */
  async function spawnApi(): Promise<{ output: () => string; port: number }> {
    const apiPort = await freePort();
    const child = spawn(process.execPath, [FLEET_BIN, "api"], {
      env: { ...process.env, ...fleet.env, PORT: String(apiPort) },
      stdio: ["ignore", "pipe", "pipe"],
    });
    children.push(child);
    let out = "";
    child.stdout?.on("data", (d) => {
      out += d;
    });
    child.stderr?.on("data", (d) => {
      out += d;
    });
    await waitFor(() => /fleet api ready/.test(out) || child.exitCode !== null, 30_000, "api start");
    if (child.exitCode !== null) throw new Error(`api exited at start:\n${out}`);
    return { output: () => out, port: apiPort };
  }

  it("the API, a worker and the sweeper each warn once, naming the policy, and export 0", async () => {
    // One after the other: three starts at once can take longer than a start may on a busy machine.
    const api = await spawnApi();
    const worker = await fleet.spawnWorker();
    const sweeper = await fleet.spawnSweeper();
    const sweeperPort = Number(/metrics on port (\d+)/.exec(sweeper.output())![1]);
    for (const output of [api.output(), worker.output(), sweeper.output()]) {
      const warnings = output.split("\n").filter((line) => WARNING.test(line));
      expect(warnings, output).toHaveLength(1);
      expect(warnings[0]).toMatch(/"level":40/);
    }
    expect(await gauge(api.port)).toBe("0");
    expect(await gauge(readyInfo(worker).metricsPort)).toBe("0");
    expect(await gauge(sweeperPort)).toBe("0");
  }, 120_000);

  it("on noeviction: no warning, and 1", async () => {
    await admin.config("SET", "maxmemory-policy", "noeviction");
    try {
      const worker = await fleet.spawnWorker();
      expect(worker.output()).not.toMatch(/maxmemory-policy/);
      expect(await gauge(readyInfo(worker).metricsPort)).toBe("1");
    } finally {
      await admin.config("SET", "maxmemory-policy", "allkeys-lru");
    }
  }, 40_000);

  it("a policy changed on the running Redis shows in the gauge and the log without a restart", async () => {
    const worker = await fleet.spawnWorker({ FLEET_EVICTION_CHECK_MS: "200", LOG_LEVEL: "info" });
    const port = readyInfo(worker).metricsPort;
    const warnings = () =>
      worker
        .output()
        .split("\n")
        .filter((line) => WARNING.test(line));
    expect(await gauge(port)).toBe("0");
    expect(warnings()).toHaveLength(1);
    await admin.config("SET", "maxmemory-policy", "noeviction");
    try {
      await waitFor(async () => (await gauge(port)) === "1", 10_000, "the gauge at 1");
      await waitFor(() => /maxmemory-policy is noeviction now/.test(worker.output()), 5_000, "the line");
    } finally {
      await admin.config("SET", "maxmemory-policy", "allkeys-lru");
    }
    await waitFor(async () => (await gauge(port)) === "0", 10_000, "the gauge at 0 again");
    // One warning per change, not one per reading.
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    expect(warnings()).toHaveLength(2);
    expect(worker.output().match(/maxmemory-policy is noeviction now/g)).toHaveLength(1);
  }, 60_000);

  it("a worker or sweeper embedded in a process whose metrics port is taken leaves no watch behind", async () => {
    // The watch starts before the metrics port; a start that fails there must stop it too, or
    // it would go on reading Redis in a process that embeds the role (its timer is unref'd).
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, "127.0.0.1", resolve));
    const metricsPort = (taken.address() as { port: number }).port;
    const CHECK_MS = 4_321; // this test's own interval, to tell the watch's timer from others
    const started = vi.spyOn(globalThis, "setInterval");
    const cleared = vi.spyOn(globalThis, "clearInterval");
    try {
      const config = { ...fleet.config, metricsPort, evictionCheckMs: CHECK_MS, logLevel: "silent" as const };
      for (const start of [() => startWorker(config), () => startSweeper(config)]) {
        started.mockClear();
        cleared.mockClear();
        await expect(start()).rejects.toThrow(new RegExp(String(metricsPort)));
        const watches = started.mock.results.filter((_, i) => started.mock.calls[i]![1] === CHECK_MS);
        expect(watches).toHaveLength(1);
        expect(cleared.mock.calls.map(([timer]) => timer)).toContain(watches[0]!.value);
      }
    } finally {
      started.mockRestore();
      cleared.mockRestore();
      await new Promise((resolve) => taken.close(resolve));
    }
  }, 60_000);

  it("a reading Redis refuses keeps the last known value", async () => {
    await admin.acl("SETUSER", "blindwatch", "on", "nopass", "~*", "&*", "+@all", "-config", "-info");
    const blind = new Redis({ port, host: "127.0.0.1", username: "blindwatch" });
    const values: number[] = [];
    const lines: string[] = [];
    const log = { warn: (m: string) => lines.push(m), info: (m: string) => lines.push(m) };
    const first = evictionVerdict({ policies: ["allkeys-lru"] });
    const stop = watchEvictionPolicy(blind, log, { set: (v) => values.push(v) }, first, 50);
    try {
      await new Promise((resolve) => setTimeout(resolve, 400));
    } finally {
      stop();
      blind.disconnect();
    }
    // Known unsafe, then refused: the gauge stays at 0 (the alert goes on), nothing logged.
    expect(values).toEqual([]);
    expect(lines).toEqual([]);
  });

  it("CONFIG refused (managed Redis): the policy is read from INFO; both refused: one notice and -1", async () => {
    // A user that may not run CONFIG, and one that may run neither CONFIG nor INFO.
    await admin.acl("SETUSER", "noconfig", "on", "nopass", "~*", "&*", "+@all", "-config");
    await admin.acl("SETUSER", "blind", "on", "nopass", "~*", "&*", "+@all", "-config", "-info");
    const lines: { level: string; message: string }[] = [];
    const log = {
      warn: (message: string) => lines.push({ level: "warn", message }),
      info: (message: string) => lines.push({ level: "info", message }),
    };
    const values: number[] = [];
    const set = { set: (v: number) => values.push(v) };
    const noConfig = new Redis({ port, host: "127.0.0.1", username: "noconfig" });
    const blind = new Redis({ port, host: "127.0.0.1", username: "blind" });
    try {
      await expect(noConfig.config("GET", "maxmemory-policy")).rejects.toThrow(/NOPERM/);
      expect(await reportEvictionPolicy(noConfig, log, set)).toMatchObject({
        safe: 0,
        policy: "allkeys-lru",
      });
      expect(await reportEvictionPolicy(blind, log, set)).toMatchObject({ safe: -1 });
    } finally {
      noConfig.disconnect();
      blind.disconnect();
    }
    expect(values).toEqual([0, -1]);
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatchObject({ level: "warn", message: expect.stringMatching(WARNING) });
    expect(lines[1]).toMatchObject({
      level: "info",
      message: expect.stringMatching(
        /could not read Redis's maxmemory-policy \(.*NOPERM.*\): make sure it is noeviction/,
      ),
    });
  });
});
