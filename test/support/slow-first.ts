/**
 * The order vitest starts test files in: the slowest first, so that with two workers the
 * run does not end on one long file while the other worker idles. Vitest orders by the
 * durations of the previous run, which a fresh checkout (`npm ci` empties node_modules, where
 * they are kept) does not have: it then orders by file size, and files such as demo or
 * batch-cli-limits (over a minute each, mostly child processes) started in the last tenth.
 * Files named here go first, in this order (the durations of the fresh-clone CI run of
 * 4 December, late evening, on a quiet machine: postgres-outage 71 s, provider-limits-fleet
 * 43 s, package 36 s, … demo 10 s); every other file keeps vitest's order.
 */
import { BaseSequencer, type TestSpecification } from "vitest/node";

export const SLOW_FILES = [
  "postgres-outage",
  "provider-limits-fleet",
  "package",
  "prometheus-live",
  "sweeper-policy",
  "provider-limits-waiters",
  "provider-limits-shares",
  "chaos-check",
  "redis-outage-rideout",
  "prometheus-alerts-live",
  "fuzz",
  "session-events-switch",
  // Moved down from 4th: its case of a part that cannot be sent waited 15.5 s of the CLI's
  // backoff, now 0.5 s (Retry-After: 0); an estimate, until the next quiet-machine run.
  "batch-cli",
  "fleet-up",
  "preflight",
  "webhooks",
  "redis-readonly-stays",
  "run-limits",
  "session-transfer-cli",
  "console-e2e",
  "batch-cli-limits",
  "tenants",
  "queue-and-cli",
  "postgres-reconnect",
  "deletion-leftovers",
  "tenant-limits",
  "active-cap-resumes",
  "data-deletion",
  "lease-fence",
  "connection-loss",
  "demo",
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
