/**
 * The bytes of a session's stored history: its texts, tool calls and provider state (the
 * measure an import's `maxHistoryBytes` bounds, imported-pages.ts), kept on its row
 * (`sessions.history_bytes`, migration 0024). Every statement that appends messages adds
 * theirs to it, so that an imported page adds its own to the stored count: each page summed
 * every stored message again, and importing a long history in pages read it n²/2 times.
 *
 * The count covers the messages up to `history_bytes_seq`. A writer adds to it only while
 * that is the session's `last_seq` (and moves both on together); a writer of a release before
 * the column (a rolling upgrade), or a row from before the migration, leaves it behind, and
 * the reader counts the messages after it (`heldBytes`) and stores the sum. Messages are never
 * changed once stored and are deleted only with their session, so a count once made holds.
 */
import type postgres from "postgres";
import type { Message } from "../messages.js";

/**
 * About how many bytes (texts, tool calls, provider state) a session's history may hold: an
 * import over all its pages (imported-pages.ts), new messages (history-room.ts), a run before
 * each model call (worker/history-bound.ts). No model takes a context near this size: a
 * session past it could only end `context_full`, while each reader of it holds all of it.
 */
export const MAX_HISTORY_BYTES = 32 * 1024 * 1024;

/** About how many bytes `messages` take when stored (the measure `maxHistoryBytes` bounds; pure). */
export function historyBytes(messages: readonly Message[]): number {
  let bytes = 0;
  for (const m of messages) {
    bytes += Buffer.byteLength(m.content, "utf8");
    if (m.role === "assistant") {
      // As stored (rows.ts toNewRows): an empty list of tool calls is stored as none.
      if (m.toolCalls?.length) bytes += Buffer.byteLength(JSON.stringify(m.toolCalls), "utf8");
      if (m.providerState) bytes += Buffer.byteLength(JSON.stringify(m.providerState), "utf8");
    }
  }
  return bytes;
}

type Sql = postgres.Sql | postgres.TransactionSql;
type Value = postgres.ParameterOrFragment<never>;

/**
 * The assignments of an `update sessions` that appends: `added` bytes counted, and the count
 * moved on to `newLastSeq`, when the count was current (see above); left behind otherwise.
 * The right-hand sides read the row as it was before the update.
 */
export function countBytes(sql: Sql, added: Value, newLastSeq: Value) {
  return sql`history_bytes = case when sessions.history_bytes_seq = sessions.last_seq
                                  then sessions.history_bytes + ${added} else sessions.history_bytes end,
             history_bytes_seq = case when sessions.history_bytes_seq = sessions.last_seq
                                      then ${newLastSeq} else sessions.history_bytes_seq end`;
}

/**
 * The stored history's bytes, for `sessionId`'s row read with `history_bytes` and
 * `history_bytes_seq`: the count, plus the messages after it summed by Postgres (there, tool
 * calls and provider state as jsonb's text, a few bytes more than JSON.stringify's).
 */
export async function heldBytes(
  sql: Sql,
  sessionId: string,
  row: { history_bytes: string | number; history_bytes_seq: number; last_seq: number },
): Promise<number> {
  if (row.history_bytes_seq >= row.last_seq) return Number(row.history_bytes);
  const [rest] = await sql<{ bytes: string }[]>`
    select coalesce(sum(octet_length(content) + coalesce(octet_length(tool_calls::text), 0)
                        + coalesce(octet_length(provider_state::text), 0)), 0)::text as bytes
      from messages where session_id = ${sessionId} and seq > ${row.history_bytes_seq}`;
  return Number(row.history_bytes) + Number(rest!.bytes);
}

/**
 * What an unpaged read of `sessionId`'s messages after `afterSeq` (0: all of them) answers, in
 * the measure above, for its row read with the count and `last_seq`: exact when it is `enough`
 * or more, else possibly a bound above it. A current count answers when it bounds the part
 * asked below `enough` (a small session, or the whole); else only the messages after
 * `afterSeq` are summed, by Postgres, on the session's (session_id, seq) index: a poll of a big
 * session's tail reads its few rows' lengths, never the whole.
 *
 * A count left behind (a row from before migration 0024, whose count is 0 up to seq 0, or
 * messages an older release's writer stored) bounds nothing: the whole read adds the messages
 * after it (`heldBytes`), as an imported page's check does. It is not stored here: a read
 * writes nothing, and a back-fill in a migration would rewrite every old session's row, under
 * its lock, in the migrations' transaction. Those reads cost one sum of the lengths of rows
 * the read itself then loads whole.
 */
export async function bytesAfter(
  sql: Sql,
  sessionId: string,
  row: { history_bytes: string | number; history_bytes_seq: number; last_seq: number },
  afterSeq: number,
  enough: number,
): Promise<number> {
  if (afterSeq >= row.last_seq) return 0;
  const counted = Number(row.history_bytes);
  const current = row.history_bytes_seq >= row.last_seq;
  if (current && (afterSeq <= 0 || counted < enough)) return counted;
  if (afterSeq <= 0) return heldBytes(sql, sessionId, row);
  return heldBytes(sql, sessionId, { history_bytes: 0, history_bytes_seq: afterSeq, last_seq: row.last_seq });
}
