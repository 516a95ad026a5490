/**
 * What Postgres has of a session, which EventWriter (event-writer.ts) compares with its event
 * stream before it drops one that is not the stored history, and the log line when it does.
 */
import type { Database } from "./db/client.js";
import { fingerprint } from "./events.js";

/** The `onDropped` of an EventWriter that says so in the log, once per stream dropped. */
export function warnDroppedStream(log: { warn(object: object, message: string): void }) {
  return (sessionId: string, streamSeq: number, storedSeq: number) =>
    log.warn(
      { sessionId, streamSeq, storedSeq },
      "the session's event stream had messages that are not the stored ones (Postgres restored from an earlier point?): dropped it and wrote it again from Postgres; readers resuming from before get 410",
    );
}

/** What Postgres has of a session: its highest message seq, and the fingerprint of its message `seq` (null: none). */
export type StoredState = { last: number; fingerprint: string | null };

export async function storedState(database: Database, sessionId: string, seq: number): Promise<StoredState> {
  // created_at as JSON, as every stored message read is (row_to_json), so its fingerprint is the same.
  const [row] = await database.sql<{ last: number; at: string | null }[]>`
    select (select coalesce(max(seq), 0)::int from messages where session_id = ${sessionId}) as last,
           (select to_json(created_at) from messages where session_id = ${sessionId} and seq = ${seq}) as at`;
  const at = row?.at ? new Date(row.at).toISOString() : null;
  return { last: row?.last ?? 0, fingerprint: at === null ? null : fingerprint({ seq, createdAt: at }) };
}
