/**
 * Totals of a process's garbage collections from V8's `--trace-gc-nvp` lines (one line per
 * collection: `[pid:isolate]  <ms> ms: pause=… gc=s … allocated=… promoted=… new_space_survived=…`).
 *
 * `bench:scale --gc` reads them from each side's worker: how many bytes it allocated, and how
 * many the young collector had to copy (survived) or move to the old generation (promoted).
 * Those are counts of the work done, not times, so a machine busy with other work changes
 * them far less than it changes the elapsed time or the pauses (docs/performance.md).
 */

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
