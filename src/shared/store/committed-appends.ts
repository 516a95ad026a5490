/**
 * Whether an append whose answer was lost committed after all. A worker riding out a Postgres
 * outage (src/worker/db-rideout.ts) sends an append again when the first try failed on a
 * lost connection, but a connection can die after Postgres committed the statement and before
 * its answer arrived. Sent blindly, the same append then meets its own commit: `last_seq`
 * has moved, the fence refuses it, and the worker would stop as fenced out. So before each
 * new try the worker reads what the session holds after its cursor:
 * - its epoch moved: someone else holds the session (a claim, the sweeper): fenced;
 * - `last_seq` still the cursor's: nothing committed; the append is sent again;
 * - exactly the append's rows after the cursor (seq, role, tool call, run, content): they are
 *   this append's own commit, found instead of stored twice;
 * - anything else: the history moved under this holder: fenced.
 * While the epoch is this holder's, only it appends to the session, so rows after its
 * cursor can only be its own; the rows are compared all the same.
 */
import { createHash } from "node:crypto";
import type { Database } from "../db/client.js";
import { FencedError } from "../errors.js";
import type { Message, StoredMessage } from "../messages.js";
import { type Fence, type HistoryCursor, stored } from "./fenced-rows.js";
import { type NewMessageRow, toNewRows } from "./rows.js";

/** The session row and the messages after an append's cursor, as read back. */
export type AfterCursor = {
  epoch: number;
  lastSeq: number;
  status: string;
  sessionEvents: boolean;
  /** The runs the session's last cancel found running (batch-cancel.ts); absent: none. */
  cancelledRuns?: readonly string[] | null;
  rows: {
    seq: number;
    role: string;
    tool_call_id: string | null;
    run_id: string | null;
    md5: string;
    created_at: Date;
  }[];
};

export type CommitFound =
  | { found: "none" }
  | {
      found: "committed";
      inserted: { seq: number; created_at: Date }[];
      status: string;
      sessionEvents: boolean;
    }
  | { found: "moved" };

/** The md5 of a text, as Postgres' md5() gives it for the same text (pure). */
export function md5Of(text: string): string {
  return createHash("md5").update(text, "utf8").digest("hex");
}

/** What the read says of the append `rows` (numbered after `lastSeq`, under `epoch`, by `runId`) (pure). */
export function judgeAppend(
  read: AfterCursor | null,
  expected: { epoch: number; lastSeq: number; runId: string | null; rows: readonly NewMessageRow[] },
): CommitFound {
  if (!read || read.epoch !== expected.epoch) return { found: "moved" };
  if (read.lastSeq === expected.lastSeq) return { found: "none" };
  const want = expected.rows;
  if (read.lastSeq !== expected.lastSeq + want.length || read.rows.length !== want.length)
    return { found: "moved" };
  const same = want.every((row, i) => {
    const got = read.rows[i]!;
    return (
      got.seq === row.seq &&
      got.role === row.role &&
      got.tool_call_id === row.tool_call_id &&
      got.run_id === expected.runId &&
      got.md5 === md5Of(row.content)
    );
  });
  return same
    ? {
        found: "committed",
        inserted: read.rows.map((r) => ({ seq: r.seq, created_at: r.created_at })),
        // As the append answers it (cancel-reads.ts `statusForRun`).
        status:
          expected.runId !== null && (read.cancelledRuns ?? []).includes(expected.runId)
            ? "cancelled"
            : read.status,
        sessionEvents: read.sessionEvents,
      }
    : { found: "moved" };
}

/** Reads the session's epoch and `last_seq` and the `count` messages after `lastSeq`, in one statement. */
export async function readAfterCursor(
  database: Database,
  sessionId: string,
  lastSeq: number,
  count: number,
): Promise<AfterCursor | null> {
  const [row] = await database.sql<
    {
      lease_epoch: string;
      last_seq: number;
      status: string;
      session_events: boolean | null;
      cancelled_runs: string[] | null;
      rows:
        | {
            seq: number;
            role: string;
            tool_call_id: string | null;
            run_id: string | null;
            md5: string;
            created_at: string;
          }[]
        | string
        | null;
    }[]
  >`
    select s.lease_epoch, s.last_seq, s.status, s.session_events, s.cancelled_runs,
           (select json_agg(json_build_object('seq', m.seq, 'role', m.role, 'tool_call_id', m.tool_call_id,
                                              'run_id', m.run_id, 'md5', md5(m.content), 'created_at', m.created_at)
                            order by m.seq)
              from messages m
             where m.session_id = s.id and m.seq > ${lastSeq} and m.seq <= ${lastSeq + count}) as rows
      from sessions s where s.id = ${sessionId}`;
  if (!row) return null;
  const rows = typeof row.rows === "string" ? (JSON.parse(row.rows) as typeof row.rows) : row.rows;
  return {
    epoch: Number(row.lease_epoch),
    lastSeq: Number(row.last_seq),
    status: row.status,
    sessionEvents: row.session_events !== false,
    cancelledRuns: row.cancelled_runs,
    rows: (Array.isArray(rows) ? rows : []).map((r) => ({ ...r, created_at: new Date(r.created_at) })),
  };
}

/**
 * Whether an append (FencedWrites `appendStep`'s arguments) that failed on a lost connection
 * committed before the connection died: its stored messages as `appendStep` answers them when
 * it did, null when nothing was stored after `cursor` (it may be sent again). Throws
 * FencedError when the epoch or the history moved.
 */
export async function findCommitted(
  database: Database,
  fence: Fence,
  cursor: HistoryCursor,
  runId: string | null,
  messages: readonly Message[],
): Promise<{ stored: StoredMessage[]; cancelled: boolean; sessionEvents: boolean } | null> {
  const rows = toNewRows(messages, cursor.lastSeq, cursor.lastStepSeq);
  const read = await readAfterCursor(database, fence.sessionId, cursor.lastSeq, rows.length);
  const found = judgeAppend(read, { epoch: fence.epoch, lastSeq: cursor.lastSeq, runId, rows });
  if (found.found === "moved") throw new FencedError(fence.sessionId, fence.epoch);
  if (found.found === "none") return null;
  return {
    stored: stored(messages, found.inserted),
    cancelled: found.status === "cancelled",
    sessionEvents: found.sessionEvents,
  };
}
