/**
 * The worker's heartbeat, for a sweeper whose Redis refuses CLIENT LIST (liveness.ts): beaten
 * before the first job is claimed, then every third of the lease TTL. A failed beat is the
 * outage log's to report; the next one tries again. fleet_worker_heartbeat_age_seconds says
 * how long ago one last went through.
 */
import type { Redis } from "ioredis";
import { type FleetMetrics, initWorkerLiveness } from "../shared/metrics.js";
import { beat, endHeartbeat } from "../shared/worker-signals.js";

export type Heartbeat = {
  /** No more beats. */
  stopBeating(): void;
  /** Takes the heartbeat out (best effort: at most 1 s, nothing while Redis is away). */
  end(): Promise<void>;
};

/** Beats once, then every third of `ttlMs`. */
export async function startHeartbeat(
  redis: Redis,
  prefix: string,
  workerId: string,
  ttlMs: number,
  metrics: FleetMetrics,
): Promise<Heartbeat> {
  let lastBeatAt = Date.now();
  const beatOnce = () =>
    beat(redis, prefix, workerId, ttlMs).then(() => {
      lastBeatAt = Date.now();
    });
  await beatOnce();
  initWorkerLiveness(metrics, ttlMs, () => lastBeatAt);
  const timer = setInterval(
    () => {
      beatOnce().catch(() => {});
    },
    Math.max(50, Math.floor(ttlMs / 3)),
  );
  timer.unref();
  return {
    stopBeating: () => clearInterval(timer),
    async end() {
      // Best effort: a Redis that is away must not hold the stop up (the beat lapses).
      if (redis.status !== "ready") return;
      const wait = new Promise<void>((resolve) => setTimeout(resolve, 1_000).unref());
      await Promise.race([endHeartbeat(redis, prefix, workerId), wait]);
    },
  };
}
