/**
 * Totals of a process's garbage collections from V8's `--trace-gc-nvp` lines (one line per
 * collection: `[pid:isolate]  <ms> ms: pause=… gc=s … allocated=… promoted=… new_space_survived=…`).
 *
 * `bench:scale --gc` reads them from each side's worker: how many bytes it allocated, and how
 * many the young collector had to copy (survived) or move to the old generation (promoted).
 * Those are counts of the work done, not times, so a machine busy with other work changes
 * them far less than it changes the elapsed time or the pauses (docs/performance.md).
 */

import { resolve } from "node:path";
import { pathToFileURL } from "node:url";

/**
 * Node options of a worker whose collections are counted between marks (`markGc`): its
 * `--trace-gc-nvp` lines, and gc-mark.mjs preloaded (a full collection, then `gc-mark N`, at
 * each SIGUSR2).
 */
export const GC_MARK_ARGS = [
  "--trace-gc-nvp",
  "--expose-gc",
  "--import",
  pathToFileURL(resolve(import.meta.dirname, "gc-mark.mjs")).href,
];

/**
 * Asks a process started with GC_MARK_ARGS for its mark number `mark` (1, 2, … in order) and
 * waits for it; resolves with the length of its output through that line. The lines between
 * two marks add up to exactly what the process allocated between them (gc-mark.mjs), where
 * output cut at an arbitrary moment was off by up to a young generation at each end.
 */
export async function markGc(
  child: { child: { pid?: number | undefined }; output: () => string },
  mark: number,
  timeoutMs = 30_000,
): Promise<number> {
  const line = `gc-mark ${mark}\n`;
  process.kill(child.child.pid!, "SIGUSR2");
  const until = Date.now() + timeoutMs;
  for (;;) {
    const at = child.output().indexOf(line);
    if (at >= 0) return at + line.length;
    if (Date.now() > until) throw new Error(`no "gc-mark ${mark}" within ${timeoutMs} ms`);
    await new Promise((done) => setTimeout(done, 20));
  }
}

export type GcTotals = {
  /** Young-generation collections (scavenges). */
  scavenges: number;
  /** Full collections (mark-compact). */
  markCompacts: number;
  /** Bytes allocated, summed over the collections (each line counts those since the one before). */
  allocatedBytes: number;
  /** Bytes the scavenges copied within the young generation. */
  survivedBytes: number;
  /** Bytes moved to the old generation. */
  promotedBytes: number;
  /** Main-thread pauses, summed (ms): wall time, which waits for GC threads a busy machine delays. */
  pauseMs: number;
};

/** Adds up the `--trace-gc-nvp` lines in `text`; other lines are skipped. */
export function gcTotals(text: string): GcTotals {
  const totals: GcTotals = {
    scavenges: 0,
    markCompacts: 0,
    allocatedBytes: 0,
    survivedBytes: 0,
    promotedBytes: 0,
    pauseMs: 0,
  };
  for (const line of text.split("\n")) {
    const kind = / gc=(\w+) /.exec(line)?.[1];
    if (kind === undefined) continue;
    const field = (name: string) => Number(new RegExp(` ${name}=([\\d.]+)`).exec(line)?.[1] ?? 0);
    if (kind === "s") totals.scavenges++;
    else if (kind === "mc") totals.markCompacts++;
    totals.allocatedBytes += field("allocated");
    totals.survivedBytes += field("new_space_survived");
    totals.promotedBytes += field("promoted");
    totals.pauseMs += field("pause");
  }
  return totals;
}

/** One line of a side's totals, per session where it says so. */
export function gcLine(totals: GcTotals, sessions: number): string {
  const kb = (bytes: number) => `${(bytes / 1024 / sessions).toFixed(1)} KB`;
  const mb = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(1)} MB`;
  return (
    `${totals.scavenges} scavenges, ${totals.markCompacts} mark-compacts; allocated ${mb(totals.allocatedBytes)} ` +
    `(${kb(totals.allocatedBytes)} a session), scavenges copied ${mb(totals.survivedBytes)} and promoted ` +
    `${mb(totals.promotedBytes)} (${kb(totals.survivedBytes + totals.promotedBytes)} a session); ` +
    `pauses ${(totals.pauseMs / 1000).toFixed(2)} s`
  );
}
