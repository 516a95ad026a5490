/**
 * The order vitest starts test files in: the slowest first, so that with two workers the
 * run does not end on one long file while the other worker idles. Vitest orders by the
 * durations of the previous run, which a fresh checkout (`npm ci` empties node_modules, where
 * they are kept) does not have: it then orders by file size, and files such as demo or
 * batch-cli-limits (over a minute each, mostly child processes) started in the last tenth.
 * Files named here go first, in this order (measured with `--reporter=json`, 3 December);
 * every other file keeps vitest's order.
 */
import { BaseSequencer, type TestSpecification } from "vitest/node";

export const SLOW_FILES = [
  "preflight",
  "batch-cli-limits",
  "lifecycle",
  "demo",
  "package",
  "fleet-up",
  "provider-limits-waiters",
  "queue-and-cli",
  "provider-limits-fleet",
  "batch-cli",
  "chaos-check",
  "batch-events-restore",
  "events-restore",
  "redis-eviction-policy",
  "cluster-liveness",
  "lease-fence",
  "tenants",
  "connection-loss",
  "frozen-worker",
  "prometheus-live",
  "prometheus-alerts-live",
  "fleet-identity",
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
