/**
 * Which worker processes are alive, from a signal bound to their Redis connection: each
 * worker names its connection `<prefix>:live:<workerId>`. The kernel closes a killed
 * process's socket at once, so a dead worker disappears from CLIENT LIST within
 * milliseconds; a frozen one (SIGSTOP) stays listed and is caught by its lease expiring.
 */
import type { Redis } from "ioredis";
import { livenessMarker } from "../shared/worker-signals.js";

/** Parses CLIENT LIST output into the ids of this fleet's live workers. */
export function parseLiveWorkers(clientList: string, prefix: string): Set<string> {
  const marker = livenessMarker(prefix);
  const ids = new Set<string>();
  for (const line of clientList.split("\n")) {
    const match = / name=(\S*)/.exec(line);
    if (match?.[1]?.startsWith(marker)) ids.add(match[1].slice(marker.length));
  }
  return ids;
}

export async function liveWorkers(redis: Redis, prefix: string): Promise<Set<string>> {
  return parseLiveWorkers((await redis.client("LIST")) as string, prefix);
}

/**
 * Confirms deaths: a worker counts as dead only when it was missing from two looks at
 * least `confirmMs` apart, so a connection that is merely reconnecting is not mistaken
 * for a crash. (The fence keeps even a wrong guess safe.)
 */
export class DeathWatch {
  private readonly missingSince = new Map<string, number>();
  constructor(private readonly confirmMs: number) {}

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
