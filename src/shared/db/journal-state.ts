/**
 * What `drizzle.__drizzle_migrations` says about a database, against the migrations this code
 * ships. Drizzle applies only the migrations newer than the newest it recorded, so a table
 * shared with another Drizzle application whose newest migration is newer than ours gets none
 * of ours, ever, though it looks migrated by that rule (pure).
 */
/**
 * `recorded`: the `created_at` of each row of the table. "migrated" once the newest shipped
 * migration is recorded (drizzle applies in order); "foreign" when it is not and rows newer
 * than it are: drizzle will apply none of ours.
 */
export function journalState(
  recorded: number[],
  shipped: number[],
): { state: "migrated" | "behind" | "foreign"; ours: number; newest: number | null; newer: number } {
  const seen = new Set(recorded);
  const ours = shipped.filter((when) => seen.has(when)).length;
  const newest = recorded.length > 0 ? Math.max(...recorded) : null;
  const last = Math.max(0, ...shipped);
  // Migrations of a newer release ("migrated"), or another application's ("foreign").
  const newer = recorded.filter((when) => when > last).length;
  if (seen.has(last)) return { state: "migrated", ours, newest, newer };
  return { state: newest !== null && newest > last ? "foreign" : "behind", ours, newest, newer };
}

/**
 * What a process of this release says of a database a newer release migrated (`newer` of its
 * migrations recorded after `lastTag`, this release's last): drizzle applies none of ours there
 * (all applied already), and the roles run on it, as a rolling upgrade needs (pure).
 */
export function newerJournalText(newer: number, lastTag: string): string {
  return (
    `migrated by a newer release (${newer} migration${newer === 1 ? "" : "s"} newer than ${lastTag}, ` +
    "this release's last)"
  );
}

/** The refusal of a "foreign" table, for `fleet migrate` and the roles' check alike. */
export function foreignJournalText(ours: number, shipped: number, newest: number | null): string {
  return (
    `drizzle.__drizzle_migrations holds another application's migrations (the newest recorded, ${newest}, ` +
    `is newer than any of agent-fleet's), so drizzle applies none of the fleet's (${ours} of ${shipped} recorded): ` +
    "give the fleet a database of its own"
  );
}
