/**
 * The order vitest starts test files in: the slowest first, so that with two workers the
 * run does not end on one long file while the other worker idles. Vitest orders by the
 * durations of the previous run, which a fresh checkout (`npm ci` empties node_modules, where
 * they are kept) does not have: it then orders by file size, and files such as demo or
 * batch-cli-limits (over a minute each, mostly child processes) started in the last tenth.
 * Files named here go first, in this order (the durations of full runs of 4 December, less
 * what the changes to package, provider-limits-fleet, fuzz and run-limits took off, and
 * redis-outage-rideout and session-transfer-cli, from the CI run of that evening); every
 * other file keeps vitest's order.
 */
import { BaseSequencer, type TestSpecification } from "vitest/node";

export const SLOW_FILES = [
  "package",
  "provider-limits-fleet",
  "batch-cli",
  "preflight",
  "batch-cli-limits",
  "queue-and-cli",
  "session-transfer-cli",
  "fuzz",
  "fleet-up",
  "redis-outage-rideout",
  "provider-limits-waiters",
  "prometheus-live",
  "provider-limits-shares",
  "chaos-check",
  "sweeper-policy",
  "session-events-switch",
  "webhooks",
  "extension-loading",
  "prometheus-alerts-live",
  "run-limits",
  "console-e2e",
  "data-deletion",
  "tenant-limits",
  "redis-readonly-stays",
  "prometheus-rules",
  "deletion-leftovers",
  "lifecycle",
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
