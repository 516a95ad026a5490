/**
 * What the sweeper's liveness check sees while a master fails over (bench/failover.ts): every
 * 50 ms, the workers listed by `liveWorkers` on a cluster connection of the sweeper's kind,
 * and, as the ground truth, each node's own `CLIENT LIST` and role asked on a plain
 * connection per port. A worker missing from the first while still listed on a node is a
 * live worker the sweeper would take for dead (after two looks 150 ms apart).
 */
import { Redis } from "ioredis";
import { closeRedis, createRedis } from "../src/shared/redis.js";
import { liveWorkers, parseLiveWorkers } from "../src/sweeper/liveness.js";

type Look = {
  at: number;
  sweeperView: Set<string> | string;
  nodes: Map<number, { role: string; ids: Set<string> }>;
};

export class LivenessWatch {
  private readonly looks: Look[] = [];
  private readonly sweeperConnection: Redis;
  private readonly plain: Map<number, Redis>;
  private timer: NodeJS.Timeout | null = null;
  private busy = false;

  constructor(
    url: string,
    ports: number[],
    private readonly prefix: string,
  ) {
    this.sweeperConnection = createRedis(url, "worker");
    this.plain = new Map(
      ports.map((port) => {
        const redis = new Redis({
          port,
          host: "127.0.0.1",
          maxRetriesPerRequest: 0,
          enableOfflineQueue: false,
          connectTimeout: 300,
          commandTimeout: 300,
          retryStrategy: () => 200,
        });
        redis.on("error", () => {});
        return [port, redis];
      }),
    );
  }

  start(): void {
    this.timer = setInterval(() => void this.look(), 50);
  }

  private async look(): Promise<void> {
    if (this.busy) return;
    this.busy = true;
    const at = Date.now();
    try {
      const [sweeperView, ...nodes] = await Promise.all([
        liveWorkers(this.sweeperConnection, this.prefix).catch((error: Error) => error.message.slice(0, 80)),
        ...[...this.plain].map(async ([port, redis]) => {
          try {
            const [role, list] = await Promise.all([
              redis.role() as Promise<unknown[]>,
              redis.client("LIST") as Promise<string>,
            ]);
            return [port, { role: String(role[0]), ids: parseLiveWorkers(list, this.prefix) }] as const;
          } catch {
            return [port, { role: "down", ids: new Set<string>() }] as const;
          }
        }),
      ]);
      this.looks.push({ at, sweeperView, nodes: new Map(nodes) });
    } finally {
      this.busy = false;
    }
  }

  async stop(): Promise<void> {
    if (!this.timer) return;
    clearInterval(this.timer);
    this.timer = null;
    await closeRedis(this.sweeperConnection);
    for (const redis of this.plain.values()) redis.disconnect();
  }

  /** Lines for the report: the sweeper's view against the nodes' lists, from `since` on. */
  report(workerIds: string[], since: number): string[] {
    const lines: string[] = [];
    let failedLooks = 0;
    const missing = new Map<string, { from: number; longest: number; example: string }>();
    for (const look of this.looks) {
      if (look.at < since) continue;
      if (typeof look.sweeperView === "string") {
        failedLooks += 1;
        continue;
      }
      for (const id of workerIds) {
        const entry = missing.get(id) ?? { from: 0, longest: -1, example: "" };
        if (look.sweeperView.has(id)) entry.from = 0;
        else {
          if (entry.from === 0) entry.from = look.at;
          const span = look.at - entry.from;
          if (span >= entry.longest) {
            entry.longest = span;
            entry.example = [...look.nodes]
              .map(([port, n]) => `${port} ${n.role}${n.ids.has(id) ? " lists it" : ""}`)
              .join(", ");
          }
        }
        missing.set(id, entry);
      }
    }
    lines.push(`liveness looks failed ${failedLooks} (every 50 ms, the sweeper's liveWorkers)`);
    for (const [id, entry] of missing)
      lines.push(
        entry.longest < 0
          ? `worker ${id} in every look of the sweeper's view`
          : `worker ${id} missing from the sweeper's view for ${entry.longest} ms at most (then: ${entry.example})`,
      );
    return lines;
  }
}
