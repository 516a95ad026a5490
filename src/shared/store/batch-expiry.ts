/**
 * Retention's choice of batches (FLEET_RETENTION_DAYS): those that ended more than the limit
 * ago, are closed, owe no webhook and have no session that may still run are marked deleted;
 * their sessions and rows then go as for `DELETE /v1/batches/:id` (data-deletion.ts).
 *
 * A session of an ended batch may still be sent a message (the batch then counts it). The send
 * locks its session and then reads the batch's mark (run-queueing.ts), and it takes no lock on
 * the batch: a mark decided in one statement read the batch idle in a snapshot taken before
 * such a send's run committed, and the purge then deleted the session with the message the API
 * had just answered `202` (test/retention-batch-message-race.test.ts). So the mark is decided
 * in three steps of one transaction: the batches are locked; then every session of theirs
 * (`for share`, which a send's `for no key update` waits for, and which waits for a send under
 * way) — a batch with a session held by another transaction is left for a later pass, not
 * waited for; then, in a statement whose snapshot is taken after those locks, the batches still
 * idle are marked. A run queued before is seen (the batch is kept); a send after waits for the
 * mark and is answered 404.
 */
import type { Database } from "../db/client.js";
import { batchBusy } from "./batch-busy.js";

/** Marks deleted up to `limit` batches idle `maxIdleMs` past their end; returns their ids. */
export async function markExpiredBatches(
  database: Database,
  maxIdleMs: number,
  limit: number,
): Promise<string[]> {
  return database.sql.begin(async (tx) => {
    const candidates = await tx<{ id: string }[]>`
      select b.id from batches b
       where b.ended_at < now() - ${maxIdleMs} * interval '1 millisecond' and b.deleted_at is null and not b.open
         and (b.webhook_url is null or b.webhook_delivered_at is not null or b.webhook_failed_at is not null)
         and not ${batchBusy(tx, tx`b.id`)}
       order by b.ended_at limit ${limit}
         for update skip locked`;
    if (candidates.length === 0) return [];
    const ids = candidates.map((c) => c.id);
    const counts = await tx<{ batch_id: string; held: number; sessions: number }[]>`
      with held as (
        select s.batch_id from sessions s where s.batch_id in ${tx(ids)} for share of s skip locked
      )
      select s.batch_id, count(*)::int as sessions,
             (select count(*)::int from held h where h.batch_id = s.batch_id) as held
        from sessions s where s.batch_id in ${tx(ids)} group by s.batch_id`;
    const partly = new Set(counts.filter((c) => c.held < c.sessions).map((c) => c.batch_id));
    const whole = ids.filter((id) => !partly.has(id));
    if (whole.length === 0) return [];
    const rows = await tx<{ id: string }[]>`
      update batches b set deleted_at = now()
       where b.id in ${tx(whole)} and not ${batchBusy(tx, tx`b.id`)}
      returning b.id`;
    return rows.map((r) => r.id);
  });
}
