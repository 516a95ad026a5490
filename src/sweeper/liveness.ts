/**
 * Which worker processes are alive, from a signal bound to their Redis connection: each
 * worker names its connection `<prefix>:live:<workerId>`. The kernel closes a killed
 * process's socket at once, so a dead worker disappears from CLIENT LIST within
 * milliseconds; a frozen one (SIGSTOP) stays listed and is caught by its lease expiring.
 *
 * CLIENT LIST answers for one server: on a Redis Cluster every master is asked and the
 * names are pooled (a worker's connection lives on whichever node it connected to). Where
 * Redis refuses CLIENT LIST (renamed, or denied by ACL, as managed services often do), the
 * first refusal switches that connection to the workers' heartbeats (worker-signals.ts) for
 * good, and says so once: deaths are then seen when a heartbeat lapses, within a lease TTL.
 */
import type { Redis } from "ioredis";
import type { Logger } from "pino";
import { masters } from "../shared/redis.js";
import { heartbeats, livenessMarker } from "../shared/worker-signals.js";

/** Parses CLIENT LIST output into the ids of this fleet's live workers. */
export function parseLiveWorkers(clientList: string, prefix: string): Set<string> {
  const marker = livenessMarker(prefix);
  const ids = new Set<string>();
  for (const name of namesStartingWith(clientList, marker)) ids.add(name.slice(marker.length));
  return ids;
}

/** The connection names in CLIENT LIST output that start with `marker`. */
function namesStartingWith(clientList: string, marker: string): string[] {
  const names: string[] = [];
  for (const line of clientList.split("\n")) {
    const match = / name=(\S*)/.exec(line);
    if (match?.[1]?.startsWith(marker)) names.push(match[1]);
  }
  return names;
}

export type LivenessMode = "client-list" | "heartbeat";

/** The mode each sweeper connection settled on; absent: not asked yet. */
const modes = new WeakMap<Redis, LivenessMode>();

/** Which signal `liveWorkers` reads on this connection (undefined before its first call). */
export function livenessMode(redis: Redis): LivenessMode | undefined {
  return modes.get(redis);
}

/**
 * Whether an error is Redis refusing CLIENT LIST itself: the command renamed away or
 * unknown, denied by ACL (NOPERM), or disabled by a managed service.
 */
export function clientListRefused(error: unknown): boolean {
  const message = error instanceof Error ? error.message : String(error);
  return /unknown command|unknown subcommand|NOPERM|no permissions?|not allowed|disabled|not supported/i.test(
    message,
  );
}

export async function liveWorkers(
  redis: Redis,
  prefix: string,
  log?: Pick<Logger, "info" | "warn">,
): Promise<Set<string>> {
  if (modes.get(redis) !== "heartbeat") {
    try {
      const lists = await Promise.all(masters(redis).map((node) => node.client("LIST") as Promise<string>));
      const ids = new Set<string>();
      for (const list of lists) for (const id of parseLiveWorkers(list, prefix)) ids.add(id);
      if (!modes.has(redis)) {
        modes.set(redis, "client-list");
        log?.info(
          { liveness: "client-list", nodes: lists.length },
          `worker liveness: connection names in CLIENT LIST (${lists.length} node${lists.length === 1 ? "" : "s"})`,
        );
      }
      return ids;
    } catch (error) {
      if (!clientListRefused(error)) throw error;
      modes.set(redis, "heartbeat");
      log?.warn(
        { liveness: "heartbeat", redisError: (error as Error).message },
        `worker liveness: Redis refuses CLIENT LIST (${(error as Error).message}); using worker heartbeats: a killed worker is seen when its heartbeat lapses (within a lease TTL) instead of within milliseconds`,
      );
    }
  }
  return heartbeats(redis, prefix);
}

/**
 * Confirms deaths: a worker counts as dead only when it was missing from two looks at
 * least `confirmMs` apart, so a connection that is merely reconnecting is not mistaken
 * for a crash. (The fence keeps even a wrong guess safe.)
 */
export class DeathWatch {
  private readonly missingSince = new Map<string, number>();
  /** `maxMissing`: for `observeOne`, how many missing ids are remembered (then the memory starts over). */
  constructor(
    private readonly confirmMs: number,
    private readonly maxMissing = Number.POSITIVE_INFINITY,
  ) {}

  /**
   * One id's look, the others' observations kept (for ids met one at a time, not as a whole
   * set of owners): whether it is confirmed dead at `now`.
   */
  observeOne(id: string, live: boolean, now: number): boolean {
    if (live) {
      this.missingSince.delete(id);
      return false;
    }
    const since = this.missingSince.get(id);
    if (since !== undefined) return now - since >= this.confirmMs;
    if (this.missingSince.size >= this.maxMissing) this.missingSince.clear();
    this.missingSince.set(id, now);
    return false;
  }

  /** Returns the ids among `owners` that are confirmed dead at `now`. */
  observe(live: ReadonlySet<string>, owners: Iterable<string>, now: number): Set<string> {
    const dead = new Set<string>();
    const seen = new Set<string>();
    for (const id of owners) {
      seen.add(id);
      if (live.has(id)) {
        this.missingSince.delete(id);
        continue;
      }
      const since = this.missingSince.get(id);
      if (since === undefined) this.missingSince.set(id, now);
      else if (now - since >= this.confirmMs) dead.add(id);
    }
    for (const id of this.missingSince.keys()) if (!seen.has(id)) this.missingSince.delete(id);
    return dead;
  }

  /** Whether some worker is missing but not yet confirmed dead. */
  pending(): boolean {
    return this.missingSince.size > 0;
  }

  /** Forget every observation (after the sweeper's own connection was re-established). */
  reset(): void {
    this.missingSince.clear();
  }
}

/**
 * The client name a sweeper gives its main Redis connection, `<prefix>:sweeper:<id>`: the
 * token of each sweep lock it takes starts with it, so another sweeper can tell that the
 * lock's holder was killed (its name gone from CLIENT LIST) without waiting for the lock's TTL.
 */
export function sweeperName(prefix: string, id: string): string {
  return `${prefix}:sweeper:${id}`;
}

/**
 * The names of this fleet's sweepers connected now (CLIENT LIST on every master); null where
 * that cannot be known (Redis refuses CLIENT LIST: the connection reads heartbeats instead).
 */
export async function liveSweepers(redis: Redis, prefix: string): Promise<Set<string> | null> {
  if (modes.get(redis) === "heartbeat") return null;
  try {
    const lists = await Promise.all(masters(redis).map((node) => node.client("LIST") as Promise<string>));
    const names = new Set<string>();
    for (const list of lists)
      for (const name of namesStartingWith(list, sweeperName(prefix, ""))) names.add(name);
    return names;
  } catch (error) {
    if (clientListRefused(error)) return null;
    throw error;
  }
}
