/**
 * A Redis Cluster with replicas for bench/failover.ts: 3 masters + 3 replicas
 * (`redis-cli --cluster create … --cluster-replicas 1`) on ports of the caller's choosing,
 * node timeout 2 s, no persistence, in a temp directory; and the three ways a managed
 * cluster loses a master: killed (SIGKILL, its replica promoted after the node timeout), a
 * manual `CLUSTER FAILOVER` on its replica, and frozen (SIGSTOP) longer than the node timeout
 * then resumed (it comes back as a replica of the promoted node). `stop()` ends exactly the
 * processes it started and removes the directory.
 */
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { sleep } from "./support.js";

const run = promisify(execFile);

export const NODE_TIMEOUT_MS = 2_000;

export async function cli(port: number, ...args: string[]): Promise<string> {
  const { stdout } = await run("redis-cli", ["-h", "127.0.0.1", "-p", String(port), ...args], {
    timeout: 5_000,
  });
  return stdout.trim();
}

async function until(check: () => Promise<boolean>, timeoutMs: number, what: string): Promise<number> {
  const started = Date.now();
  for (;;) {
    if (await check().catch(() => false)) return Date.now() - started;
    if (Date.now() - started > timeoutMs)
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(50);
  }
}

export type Shard = { master: number; replica: number };

export class ReplicatedCluster {
  private readonly children = new Map<number, ChildProcess>();
  private dir = "";

  constructor(readonly ports: number[]) {}

  get url(): string {
    return `redis+cluster://${this.ports.map((p) => `127.0.0.1:${p}`).join(",")}`;
  }

  async start(): Promise<void> {
    this.dir = await mkdtemp(join(tmpdir(), "fleet-failover-"));
    for (const port of this.ports) this.spawn(port);
    for (const port of this.ports)
      await until(async () => (await cli(port, "ping")) === "PONG", 10_000, `redis on ${port}`);
    await run(
      "redis-cli",
      [
        "--cluster",
        "create",
        ...this.ports.map((p) => `127.0.0.1:${p}`),
        "--cluster-replicas",
        "1",
        "--cluster-yes",
      ],
      { timeout: 30_000 },
    );
    await this.settled();
  }

  private spawn(port: number): void {
    const child = spawn(
      "redis-server",
      [
        ...["--port", String(port), "--bind", "127.0.0.1", "--dir", this.dir],
        ...["--save", "", "--appendonly", "no", "--logfile", join(this.dir, `${port}.log`)],
        ...["--cluster-enabled", "yes", "--cluster-config-file", join(this.dir, `nodes-${port}.conf`)],
        ...["--cluster-node-timeout", String(NODE_TIMEOUT_MS)],
      ],
      { stdio: "ignore" },
    );
    this.children.set(port, child);
  }

  /** Waits until every running node says `cluster_state:ok` and each master has a replica in sync. */
  async settled(timeoutMs = 60_000): Promise<number> {
    return until(
      async () => {
        for (const port of this.ports) {
          if (!this.running(port)) continue;
          if (!/cluster_state:ok/.test(await cli(port, "cluster", "info"))) return false;
        }
        const shards = await this.shards();
        if (shards.length !== 3) return false;
        // A replica that has not synced yet cannot be promoted.
        for (const { replica } of shards)
          if (!/master_link_status:up/.test(await cli(replica, "info", "replication"))) return false;
        return true;
      },
      timeoutMs,
      "cluster_state:ok with 3 replicated masters",
    );
  }

  private running(port: number): boolean {
    const child = this.children.get(port);
    return child !== undefined && child.exitCode === null && child.signalCode === null;
  }

  /** Masters with a connected replica, read from a running node's CLUSTER NODES. */
  async shards(): Promise<Shard[]> {
    const port = this.ports.find((p) => this.running(p))!;
    const lines = (await cli(port, "cluster", "nodes")).split("\n");
    const nodes = lines.map((line) => {
      const [id, address, flags, masterId, , , , link] = line.split(" ");
      return {
        id: id!,
        port: Number(address!.split("@")[0]!.split(":")[1]),
        flags: flags!.split(","),
        masterId: masterId!,
        connected: link === "connected",
      };
    });
    const shards: Shard[] = [];
    for (const master of nodes) {
      if (!master.flags.includes("master") || master.flags.includes("fail") || !master.connected) continue;
      const replica = nodes.find((n) => n.masterId === master.id && n.connected && !n.flags.includes("fail"));
      if (replica) shards.push({ master: master.port, replica: replica.port });
    }
    return shards;
  }

  /** The master serving `key`'s slot, and its replica. */
  async shardOf(key: string): Promise<Shard> {
    const slot = Number(await cli(this.ports[0]!, "cluster", "keyslot", key));
    const slotsLines = (await cli(this.ports[0]!, "cluster", "nodes")).split("\n");
    for (const line of slotsLines) {
      const parts = line.split(" ");
      if (!parts[2]!.includes("master")) continue;
      const port = Number(parts[1]!.split("@")[0]!.split(":")[1]);
      for (const range of parts.slice(8)) {
        const [from, to] = range.split("-").map(Number);
        if (slot >= from! && slot <= (to ?? from!)) {
          const shard = (await this.shards()).find((s) => s.master === port);
          if (shard) return shard;
        }
      }
    }
    throw new Error(`no replicated master serves slot ${slot}`);
  }

  /** Ms until `port` says `role:master` (a promoted replica). */
  promoted(port: number, timeoutMs = 30_000): Promise<number> {
    return until(
      async () => /^role:master/m.test(await cli(port, "info", "replication")),
      timeoutMs,
      `${port} promoted`,
    );
  }

  kill(port: number): void {
    this.children.get(port)?.kill("SIGKILL");
  }

  /** Starts a killed node again on its config file: it rejoins as a replica of its promoted replica. */
  async restart(port: number): Promise<void> {
    const child = this.children.get(port);
    if (child && child.exitCode === null && child.signalCode === null) return;
    if (child)
      await new Promise((resolve) =>
        child.exitCode !== null || child.signalCode !== null ? resolve(null) : child.once("exit", resolve),
      );
    this.spawn(port);
  }

  freeze(port: number): void {
    this.children.get(port)?.kill("SIGSTOP");
  }

  thaw(port: number): void {
    this.children.get(port)?.kill("SIGCONT");
  }

  async stop(): Promise<void> {
    await Promise.all(
      [...this.children.values()].map(
        (child) =>
          new Promise<void>((resolve) => {
            if (child.exitCode !== null || child.signalCode !== null) return resolve();
            child.once("exit", () => resolve());
            child.kill("SIGCONT");
            child.kill("SIGKILL");
          }),
      ),
    );
    if (this.dir) await rm(this.dir, { recursive: true, force: true });
  }
}
