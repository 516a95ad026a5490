/**
 * The names of the tools the fleet offers (contracts.md §12), kept in one Redis set per
 * fleet because two roles agree on it: every worker adds the names it registered
 * (built-ins and `--tools` files) when it starts, and the API refuses an agent that lists
 * a name not in it. The set only grows — a name stays accepted after the workers that
 * offered it stop — so a name once seen never needs reading again; a run that still finds
 * a listed tool missing on its worker ends `invalid_agent`. Workers write their names again
 * while they run (`keepToolNamesRegistered`): Redis may lose the set.
 */
import type { Redis } from "ioredis";

/** The built-in tools (contracts.md §5): every worker registers them, so they are always known. */
export const BUILTIN_TOOL_NAMES: readonly string[] = ["write_file", "append_file", "sleep", "fail"];

/** The Redis set holding every tool name a worker of the fleet registered. */
export function toolNamesKey(prefix: string): string {
  return `${prefix}:tools`;
}

/** Adds a worker's tool names to the fleet's set (idempotent). */
export async function registerToolNames(
  redis: Redis,
  prefix: string,
  names: readonly string[],
): Promise<void> {
  if (names.length > 0) await redis.sadd(toolNamesKey(prefix), ...names);
}

/**
 * Writes a worker's names again for as long as it runs: when its connection is ready again
 * (Redis restarted, maybe empty) and every `everyMs` (a Redis emptied under a connection that
 * stayed up: FLUSHALL, a managed Redis restarted behind its proxy). Written at start only, the
 * set lost with Redis's data stayed empty while the workers ran, and an API started since
 * refused every agent listing a tool of theirs. Returns the function that stops it.
 */
export function keepToolNamesRegistered(
  redis: Redis,
  prefix: string,
  names: readonly string[],
  everyMs: number,
): () => void {
  const write = () => {
    if (redis.status === "ready") registerToolNames(redis, prefix, names).catch(() => {});
  };
  redis.on("ready", write);
  const timer = setInterval(write, Math.max(100, everyMs));
  timer.unref();
  return () => {
    clearInterval(timer);
    redis.off("ready", write);
  };
}

/** Every tool name registered in the fleet so far. */
export function readToolNames(redis: Redis, prefix: string): Promise<string[]> {
  return redis.smembers(toolNamesKey(prefix));
}

/**
 * The API's view of the fleet's tool names. Because the set only grows, names seen once are
 * cached for good and Redis is read (one SMEMBERS) only when a request lists a name not yet
 * seen — so a tool a new worker just registered is accepted on the next request.
 */
export class FleetToolNames {
  private readonly seen = new Set<string>(BUILTIN_TOOL_NAMES);

  constructor(private readonly read: () => Promise<readonly string[]>) {}

  /** The names known to the fleet, read again first if any of `names` is not yet known. */
  async known(names: Iterable<string>): Promise<ReadonlySet<string>> {
    for (const name of names) {
      if (this.seen.has(name)) continue;
      for (const registered of await this.read()) this.seen.add(registered);
      break;
    }
    return this.seen;
  }
}
