/**
 * The order vitest starts test files in: the slowest first, so that with several forks the
 * run does not end on one long file while the others idle. Vitest orders by the
 * durations of the previous run, which a fresh checkout (`npm ci` empties node_modules, where
 * they are kept) does not have: it then orders by file size, and files such as demo or
 * batch-cli-limits (over a minute each, mostly child processes) started in the last tenth.
 * Files named here go first, in this order (each file's time from its start to its end, hooks
 * included, in a whole run of 5 December on a quiet machine with three forks: package 66 s,
 * provider-limits-fleet 50 s, batch-cli 43 s, … tenant-limits 15 s; those added on 6 December
 * from that day's CI, where worker-stop-redis-away took 63 s and webhook-taken-not-failed 38 s);
 * every other file keeps vitest's order.
 */
import { BaseSequencer, type TestSpecification } from "vitest/node";

export const SLOW_FILES = [
  "package",
  "worker-stop-redis-away",
  "provider-limits-fleet",
  "batch-cli",
  "prometheus-rules",
  "session-transfer-cli",
  "preflight",
  "postgres-rideout",
  "provider-limits-waiters",
  "postgres-outage",
  "prometheus-live",
  "console-e2e",
  "webhook-taken-not-failed",
  "console-hostile-content",
  "chaos-check",
  "fuzz",
  "redis-outage-rideout",
  "provider-limits-shares",
  "prometheus-alerts-live",
  "lifecycle",
  "sweeper-stop-redis-away",
  "worker-exit-deadline",
  "session-transfer-hardening",
  "sweeper-policy",
  "fleet-up",
  "run-limits",
  "webhooks",
  "batch-events-restore",
  "demo",
  "redis-readonly-stays",
  "queue-and-cli",
  "data-deletion",
  "batch-cli-limits",
  "console-long-session",
  "poison-session-kills",
  "migrate-lock-wait",
  "hostile-endpoints",
  "tenant-limits",
  "tenants",
  "newer-agent-old-worker",
  "extension-loading",
].map((name) => `test/${name}.test.ts`);

/** `files` with those of `slow` first, in `slow`'s order, then the others in their order (pure). */
export function slowFirst<T>(files: readonly T[], pathOf: (file: T) => string, slow: readonly string[]): T[] {
  const rank = (file: T) => {
    const path = pathOf(file).replaceAll("\\", "/");
    const index = slow.findIndex((name) => path.endsWith(`/${name}`));
    return index === -1 ? slow.length : index;
  };
  return files
    .map((file, order) => ({ file, order, rank: rank(file) }))
    .sort((a, b) => a.rank - b.rank || a.order - b.order)
    .map(({ file }) => file);
}

export default class SlowFirstSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    return slowFirst(await super.sort(files), (file) => file.moduleId, SLOW_FILES);
  }
}
