/**
 * A batch's event stream checked against Postgres (README, Restoring from backups). The
 * stream is derived from Postgres (batch-event-sync.ts) and each event is written once (the
 * done set). With Postgres restored to an earlier point while Redis kept its newer state, the
 * stream holds ends of the lost timeline — a `BATCH_COMPLETED` with its counts while the
 * batch runs again, `SESSION_ENDED` of runs Postgres no longer has — and the done set keeps
 * the restored timeline's ends from ever being written.
 *
 * So every event is written with a fingerprint of what Postgres had when it was derived, kept
 * in `<prefix>:batch-events-fp:<batchId>` (a hash, member → fingerprint): for a session's end,
 * the id of its latest run (`run:ID`, `run:` for none); for `BATCH_COMPLETED`, the batch's
 * `ended_at` (set once, never cleared). A reader's first pass checks them: a run Postgres does
 * not have of a session it has (a deleted session takes its runs along), or another `ended_at` (null: the batch is running again in Postgres's eyes), can
 * only come from another timeline, and the stream, its done set and its fingerprints are
 * dropped (guarded: only while the fingerprint that proved it is still there), so the pass
 * that follows writes them again from Postgres. A reader whose place was in the dropped
 * stream gets 410 (event-expiry.ts). Streams written before fingerprints were kept are not
 * checked.
 */
import type { Redis } from "ioredis";
import { eventsNotifyChannel } from "../shared/events.js";

/** The member of a batch's `BATCH_COMPLETED` in its done set and fingerprints. */
export const BATCH_MEMBER = "\u0000batch";
const RUN = "run:";

export function batchStreamKeys(prefix: string, batchId: string) {
  return {
    stream: `${prefix}:batch-events:${batchId}`,
    done: `${prefix}:batch-events-done:${batchId}`,
    fingerprints: `${prefix}:batch-events-fp:${batchId}`,
  };
}

/** A session end's fingerprint: the id of the session's latest run (null: it never had one). */
export function sessionFingerprint(lastRun: string | null): string {
  return `${RUN}${lastRun ?? ""}`;
}

/** What Postgres says of the fingerprints of one page. */
export type StoredFacts = { endedAt: string | null; missingRuns: ReadonlySet<string> };

/** The (session, run) pairs a page of fingerprints names (pure). */
export function runsNamed(
  page: readonly [member: string, fp: string][],
): [sessionId: string, runId: string][] {
  const pairs: [string, string][] = [];
  for (const [member, fp] of page)
    if (member !== BATCH_MEMBER && fp.startsWith(RUN) && fp.length > RUN.length)
      pairs.push([member, fp.slice(RUN.length)]);
  return pairs;
}

/**
 * The first fingerprint Postgres contradicts, or null (pure): a `BATCH_COMPLETED` recorded
 * with another `ended_at` than Postgres's, or a session end whose run Postgres does not have.
 */
export function contradicted(
  page: readonly [member: string, fp: string][],
  stored: StoredFacts,
): [member: string, fp: string] | null {
  for (const [member, fp] of page) {
    if (member === BATCH_MEMBER) {
      if (fp !== (stored.endedAt ?? "")) return [member, fp];
    } else if (fp.startsWith(RUN) && stored.missingRuns.has(fp.slice(RUN.length))) return [member, fp];
  }
  return null;
}

/** KEYS: stream, done set, fingerprints. ARGV: member, fingerprint, channel. */
const DROP_SCRIPT = `
if redis.call('HGET', KEYS[3], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
redis.call('PUBLISH', ARGV[3], KEYS[1])
return 1
`;

type RedisWithDrop = {
  fleetBatchEventsDropStale(stream: string, done: string, fps: string, ...args: string[]): Promise<number>;
};

export type BatchStreamCheckDeps = {
  redis: Redis;
  prefix: string;
  batches: {
    /** The batch's `ended_at` as an ISO string, or null (not ended, or no such batch). */
    endedAt(batchId: string): Promise<string | null>;
    /** The runs of these (session, run) pairs Postgres does not have while it has the session. */
    missingRuns(pairs: readonly [sessionId: string, runId: string][]): Promise<Set<string>>;
  };
  /** Told of each stream dropped (a log line). */
  onDropped?: (batchId: string, member: string, fingerprint: string) => void;
};

const PAGE = 1_000;

export class BatchStreamCheck {
  constructor(private readonly deps: BatchStreamCheckDeps) {
    if (!(deps.redis as unknown as Partial<RedisWithDrop>).fleetBatchEventsDropStale)
      deps.redis.defineCommand("fleetBatchEventsDropStale", { numberOfKeys: 3, lua: DROP_SCRIPT });
  }

  /** Drops the batch's stream when Postgres contradicts one of its fingerprints; whether it did. */
  async dropIfStale(batchId: string): Promise<boolean> {
    const { redis, prefix, batches } = this.deps;
    const keys = batchStreamKeys(prefix, batchId);
    let cursor = "0";
    let endedAt: string | null | undefined;
    do {
      const [next, flat] = await redis.hscan(keys.fingerprints, cursor, "COUNT", PAGE);
      cursor = next;
      const page: [string, string][] = [];
      for (let i = 0; i + 1 < flat.length; i += 2) page.push([flat[i]!, flat[i + 1]!]);
      if (page.length === 0) continue;
      if (endedAt === undefined && page.some(([member]) => member === BATCH_MEMBER))
        endedAt = await batches.endedAt(batchId);
      const runs = runsNamed(page);
      const missingRuns = runs.length > 0 ? await batches.missingRuns(runs) : new Set<string>();
      const found = contradicted(page, { endedAt: endedAt ?? null, missingRuns });
      if (found === null) continue;
      const dropped = await (redis as unknown as RedisWithDrop).fleetBatchEventsDropStale(
        keys.stream,
        keys.done,
        keys.fingerprints,
        found[0],
        found[1],
        eventsNotifyChannel(prefix),
      );
      if (dropped === 1) this.deps.onDropped?.(batchId, found[0], found[1]);
      return dropped === 1;
    } while (cursor !== "0");
    return false;
  }
}
