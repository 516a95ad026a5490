/**
 * Redis's `maxmemory-policy`, checked when a role starts (API, worker, sweeper) and every
 * FLEET_EVICTION_CHECK_MS after (`watchEvictionPolicy`). The
 * fleet keeps its session leases, queued jobs, events and worker heartbeats in Redis; any
 * policy but `noeviction` lets Redis delete them when it is full (`volatile-*` too: leases
 * and heartbeats have a TTL). The role logs one warning naming the policy and the risk, and
 * `fleet_redis_eviction_policy_safe` says it: 1 `noeviction`, 0 another policy, -1 not known.
 * Managed Redis often refuses CONFIG: the policy is then read from `INFO memory`
 * (`maxmemory_policy`), and when that is refused too, one line says it could not be checked.
 */
import type { Redis } from "ioredis";
import { clusterReady, masters } from "./redis.js";

/** What a role found: every master's policy, or why it could not be read. */
export type EvictionPolicyReading = { policies: string[] } | { refused: string };

export type EvictionVerdict =
  | { safe: 1; policy: "noeviction" }
  | { safe: 0; policy: string; warning: string }
  | { safe: -1; notice: string };

/** Pure: the gauge value and the line to log, if any. */
export function evictionVerdict(reading: EvictionPolicyReading): EvictionVerdict {
  if ("refused" in reading) {
    return {
      safe: -1,
      notice:
        `could not read Redis's maxmemory-policy (${reading.refused}): make sure it is noeviction, ` +
        "or Redis may evict the fleet's leases, queued jobs and events when it is full",
    };
  }
  const unsafe = [...new Set(reading.policies.filter((p) => p !== "noeviction"))];
  if (unsafe.length === 0) return { safe: 1, policy: "noeviction" };
  const policy = unsafe.join(", ");
  return {
    safe: 0,
    policy,
    warning:
      `Redis maxmemory-policy is ${policy}, not noeviction: when Redis is full it may evict the ` +
      "fleet's session leases, queued jobs, events and worker heartbeats (runs stall or start again, " +
      "events are lost). Set maxmemory-policy noeviction on the Redis behind REDIS_URL",
  };
}

/** `maxmemory_policy:…` of an `INFO memory` answer. */
export function policyFromInfo(info: string): string | undefined {
  return /^maxmemory_policy:(\S+)/m.exec(info)?.[1];
}

/** One server's policy: CONFIG GET, else INFO memory (managed Redis), else the refusal. */
async function policyOf(node: Redis): Promise<string> {
  try {
    const answer = (await node.config("GET", "maxmemory-policy")) as unknown as string[];
    if (typeof answer[1] === "string") return answer[1];
  } catch {
    // CONFIG is renamed or not allowed: INFO usually is.
  }
  const policy = policyFromInfo(await node.info("memory"));
  if (!policy) throw new Error("neither CONFIG GET nor INFO memory names it");
  return policy;
}

/** Every master's policy (one server, or each master of a cluster). Never throws. */
export async function readEvictionPolicy(redis: Redis): Promise<EvictionPolicyReading> {
  try {
    await clusterReady(redis);
    return { policies: await Promise.all(masters(redis).map(policyOf)) };
  } catch (error) {
    return { refused: (error as Error).message };
  }
}

type Log = { warn(message: string): void; info(message: string): void };

/**
 * Reads the policy, sets the gauge and logs at most one line. Bounded by `timeoutMs`: a Redis
 * that does not answer (the role's own outage log says so) leaves the gauge at -1 and delays
 * no start.
 */
export async function reportEvictionPolicy(
  redis: Redis,
  log: Log,
  gauge: { set(value: number): void },
  timeoutMs = 3_000,
): Promise<EvictionVerdict> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<EvictionPolicyReading>((resolve) => {
    timer = setTimeout(() => resolve({ refused: `no answer within ${timeoutMs} ms` }), timeoutMs);
  });
  const reading = await Promise.race([readEvictionPolicy(redis), late]).finally(() => clearTimeout(timer));
  const verdict = evictionVerdict(reading);
  gauge.set(verdict.safe);
  switch (verdict.safe) {
    case 1:
      break;
    case 0:
      log.warn(verdict.warning);
      break;
    case -1:
      log.info(verdict.notice);
      break;
  }
  return verdict;
}

/**
 * Reads the policy again every `intervalMs` after the start's reading (`first`), so a policy
 * changed on a running Redis (`CONFIG SET`, a failover to a server configured otherwise) shows
 * in the gauge and the alert within that time, not only after a restart. Logs only a change:
 * one warning when it becomes unsafe, one line when it is `noeviction` again. A reading Redis
 * refuses (it is away: the role's outage log says so) keeps the last known value. Returns the
 * stop; the timer never holds the process open.
 */
export function watchEvictionPolicy(
  redis: Redis,
  log: Log,
  gauge: { set(value: number): void },
  first: EvictionVerdict,
  intervalMs: number,
): () => void {
  let known = first.safe;
  let reading = false;
  const timer = setInterval(() => {
    if (reading) return;
    reading = true;
    void readEvictionPolicy(redis)
      .then((answer) => {
        if ("refused" in answer && known !== -1) return;
        const verdict = evictionVerdict(answer);
        gauge.set(verdict.safe);
        if (verdict.safe === known) return;
        known = verdict.safe;
        if (verdict.safe === 0) log.warn(verdict.warning);
        if (verdict.safe === 1) log.info("Redis maxmemory-policy is noeviction now");
      })
      .finally(() => {
        reading = false;
      });
  }, intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}

/** The start's reading (`reportEvictionPolicy`), then the watch: what every role runs. Returns the stop. */
export async function checkEvictionPolicy(
  redis: Redis,
  log: Log,
  gauge: { set(value: number): void },
  intervalMs: number,
): Promise<() => void> {
  return watchEvictionPolicy(redis, log, gauge, await reportEvictionPolicy(redis, log, gauge), intervalMs);
}
