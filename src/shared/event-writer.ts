/**
 * EventWriter: EventStreamWrites (event-stream-writes.ts), the writes of session event streams
 * to Redis, and the repairs and syncs that keep a stream the stored history, read from
 * Postgres: a stream started again or rebuilt from its tail, a run's missing end, the runs of
 * messages a job did not commit itself.
 */
import type { Database } from "./db/client.js";
import type { RedisWithAppend } from "./event-scripts.js";
import { storedState } from "./event-stored-state.js";
import { EventStreamWrites } from "./event-stream-writes.js";
import { eventStreamKey, fingerprint, type SessionEventInput, seqKey, toStored } from "./events.js";
import type { StoredMessage } from "./messages.js";
import { dropRestoredTombstone } from "./restored-tombstone.js";
import { json, messageFromRaw, type RawMessage } from "./store/rows.js";

export { type StoredState, storedState, warnDroppedStream } from "./event-stored-state.js";
export type { EventsCounter, WriteResult } from "./event-stream-writes.js";
export { chunkStarts, WRITE_CHUNK } from "./event-write-chunks.js";

export class EventWriter extends EventStreamWrites {
  /**
   * Starts the session's stream again (its `sessionEvents` turned on): the `off` marker goes,
   * and every stored message is written (`writeAfterSync`).
   */
  async startStream(database: Database, sessionId: string): Promise<void> {
    if (!this.enabled) return;
    await (this.redis as unknown as RedisWithAppend).fleetEventsOn(seqKey(this.prefix, sessionId));
    await this.writeAfterSync(database, sessionId, []);
  }

  /**
   * The runs that committed these stored messages of the session (those that have one), read
   * from Postgres; none without a database. A job's log asks for the messages of its history
   * it did not commit itself when the stream lacks them (a crashed job's, a lost write's), so
   * that their MESSAGE events carry their `runId` (contracts §7), as the sweeper's do.
   */
  async runsOf(sessionId: string, seqs: readonly number[]): Promise<ReadonlyMap<number, string>> {
    const database = this.store.database;
    if (!database || seqs.length === 0) return new Map();
    const rows = await database.sql<{ seq: number; run_id: string }[]>`
      select seq, run_id::text from messages
       where session_id = ${sessionId} and seq = any(string_to_array(${seqs.join(",")}, ',')::int[]) and run_id is not null`;
    return new Map(rows.map((row) => [row.seq, row.run_id]));
  }

  /**
   * A tombstone a write met, when Postgres has its session again (restored-tombstone.ts): it
   * and the deleted stream are dropped (true), the write then starts the stream again. Without
   * `store.database` (the API, the sweeper), their syncs from Postgres do it (writeAfterSync).
   */
  protected override droppedRestoredTombstone(sessionId: string): Promise<boolean> {
    const database = this.store.database;
    if (!database) return Promise.resolve(false);
    return dropRestoredTombstone(this.redis, this.prefix, database, sessionId);
  }

  /** `dropIfStale`, with what is stored read from `store.database` now. False without one. */
  async dropIfStaleInStore(
    sessionId: string,
    seen: number,
    seenFingerprint: string | null,
  ): Promise<boolean> {
    if (!this.store.database) return false;
    const stored = await storedState(this.store.database, sessionId, seen);
    return this.dropIfStale(sessionId, seen, seenFingerprint, stored);
  }

  /**
   * The RUN_COMPLETED of the session's latest ended run, when it ended more than `graceMs`
   * ago (on Postgres's clock) and its stream lacks it: whoever ended the run died (or lost
   * Redis) between committing the end and writing the event — with the SESSION_PARKED of the
   * parking that end made, which went in the same write. Written after the stored messages
   * the stream lacks, exactly like the sweeper's; a late writer's own RUN_COMPLETED for that
   * run is then skipped (APPEND_SCRIPT's `done`). It carries the run's end time (`endedAt`, as
   * its runs row has it): its `at` is this write's, maybe long after. Returns the run it wrote
   * the end of, or null.
   */
  async missingRunEnd(database: Database, sessionId: string, graceMs: number): Promise<string | null> {
    if (!this.enabled) return null;
    // The latest ended run, unless a later run has started since (its RUN_STARTED is in the
    // stream: an end written now would come after it). Later: in the order runs run
    // (schema.ts `queueSeq`), which `created_at` is not always.
    const [run] = await database.sql<
      { id: string; ended_reason: string | null; ended_at: string; settled: boolean; parked: string | null }[]
    >`
      select x.id, x.ended_reason,
             to_char(x.ended_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') as ended_at,
             -- The parking this run's end made in its own statement (a worker's end: the same
             -- now() on both rows), still the session's: its SESSION_PARKED went with the end.
             (select split_part(p.parked_reason, ':', 1) from sessions p
               where p.id = ${sessionId} and p.status = 'parked' and p.updated_at = x.ended_at
                 and x.started_at is not null and p.park_announcement is null) as parked,
             x.ended_at < now() - make_interval(secs => ${graceMs / 1000})
               and x.ended_at > now() - make_interval(secs => ${this.retention.maxAgeMs / 1000}) as settled
        from (select id, ended_reason, ended_at, started_at, queue_seq, created_at from runs
               where session_id = ${sessionId} and status = (select 'ended'::text)
               order by queue_seq desc, created_at desc, id desc limit 1) x
       where not exists (select 1 from runs y where y.session_id = ${sessionId}
                           and (y.queue_seq, y.created_at, y.id) > (x.queue_seq, x.created_at, x.id)
                           and y.started_at is not null)
         -- A session created with sessionEvents: false has no stream to complete; nor has one
         -- of a batch marked deleted (the runs the mark ended went with it: SESSION_DELETED).
         and not exists (select 1 from sessions z where z.id = ${sessionId}
                           and (not z.session_events
                                or exists (select 1 from batches b where b.id = z.batch_id
                                                                    and b.deleted_at is not null)))`;
    // Ended too recently (its writer may be on its way), or so long ago that its stream expired.
    if (!run?.settled) return null;
    if ((await this.redis.hget(seqKey(this.prefix, sessionId), "done")) === run.id) return null;
    // A stream written before `done` was kept: its recent entries tell.
    const recent = (await this.redis.xrevrange(
      eventStreamKey(this.prefix, sessionId),
      "+",
      "-",
      "COUNT",
      RECENT_ENTRIES,
    )) as [string, string[]][];
    for (const row of recent) {
      const event = toStored(row);
      if (event.type === "RUN_COMPLETED" && event.data.runId === run.id) return null;
    }
    await this.writeAfterSync(database, sessionId, [
      { type: "RUN_COMPLETED", runId: run.id, outcome: run.ended_reason ?? "failed", endedAt: run.ended_at },
      // Its worker wrote both in one write, under the same `parkId` (worker/end-run.ts).
      ...(run.parked
        ? [{ type: "SESSION_PARKED" as const, reason: run.parked, parkId: run.id, runId: run.id }]
        : []),
    ]);
    return run.id;
  }

  /**
   * The seq of the stored message a stream Redis no longer has starts after when it is written
   * again up to message `last`: the message before the last `maxEvents`, what retention would
   * keep (0 or less: none, the stream starts at the first message).
   */
  tailFloor(last: number): number {
    return last - this.retention.maxEvents;
  }

  /**
   * Starts the session's stream past stored message `floor` when Redis has neither the stream
   * nor its seq key (FLOOR_SCRIPT: marked as trimmed before it, so a reader from its start is
   * told it expired); the next write goes on after `floor`. False: either key exists (someone
   * wrote meanwhile, or the session is deleted or its stream off), nothing done.
   */
  async startAt(sessionId: string, floor: StoredMessage): Promise<boolean> {
    const started = await (this.redis as unknown as RedisWithAppend).fleetEventsFloor(
      eventStreamKey(this.prefix, sessionId),
      seqKey(this.prefix, sessionId),
      floor.seq,
      fingerprint(floor),
      this.retention.maxAgeMs,
    );
    return started === 1;
  }

  /**
   * Writes `events` after every stored message the stream lacks, read from Postgres (the
   * sweeper's way, and anyone's without the history in memory). A stream Redis no longer has
   * (lost, evicted; never started) starts at the last `maxEvents` stored messages, what
   * retention would keep of them (FLOOR_SCRIPT), not at the first: a reader's look that found
   * a run's end missing wrote 20,000 messages for a session of 20,000, and readers get 410
   * for every place before the rebuild either way. `through`: the last stored message the
   * events follow (a run's end, as its ending statement left the session): none after it is
   * written, and a stream already past it (a later run's messages: the writer froze after
   * its commit) gets a check at it, so the script sees the writer behind and skips its end.
   */
  async writeAfterSync(
    database: Database,
    sessionId: string,
    events: readonly SessionEventInput[],
    through?: number,
  ) {
    if (!this.enabled) return;
    const { sql } = database;
    for (let attempt = 0; attempt < 3; attempt++) {
      let last = await this.lastSeq(sessionId);
      // From the stream's last message on (checked: it must be the stored one), with the
      // highest stored seq: a stream past it has messages Postgres no longer has. No stream:
      // from the message before the last `maxEvents` (its floor), if there is one.
      const upTo = through ?? null;
      const checkAt = upTo !== null && upTo < last ? upTo : last;
      const from = last > 0 ? sql`${checkAt}` : sql`greatest(0, s.stored - ${this.retention.maxEvents})`;
      const found = await sql<{ stored: number; off: boolean; m: string | RawMessage | null }[]>`
        select s.stored, s.off, row_to_json(m) as m
          from (select coalesce(max(seq), 0)::int as stored,
                       exists (select 1 from sessions z where z.id = ${sessionId} and not z.session_events) as off
                  from messages where session_id = ${sessionId}) s
          left join messages m on m.session_id = ${sessionId} and m.seq >= ${from} and not s.off
                                 and (${upTo}::int is null or m.seq <= ${upTo}::int)
         order by m.seq`;
      // Created with sessionEvents: false: it has no stream, and none is started here.
      if (found[0]?.off) return;
      const stored = found[0]?.stored ?? 0;
      if (await this.dropIfStale(sessionId, last, null, { last: stored, fingerprint: null })) continue;
      const rows = found.flatMap((row) => {
        if (row.m === null) return [];
        const raw = json<RawMessage>(row.m);
        return [{ runId: raw.run_id, message: messageFromRaw(raw) }];
      });
      const floor = last === 0 && this.tailFloor(stored) > 0 ? rows[0]?.message : undefined;
      if (floor !== undefined && floor.seq > 0) {
        // Written meanwhile: read where it stands now.
        if (!(await this.startAt(sessionId, floor))) continue;
        last = floor.seq;
      }
      const check =
        rows[0]?.message.seq === (floor !== undefined ? last : checkAt) ? rows[0].message : undefined;
      const messages = rows.filter((row) => row.message.seq > last);
      const result = await this.writeEntries(
        sessionId,
        [
          ...messages.map((m) => ({ type: "MESSAGE" as const, runId: m.runId, message: m.message })),
          ...events,
        ],
        check,
      );
      if (result.ok) {
        // A tombstone: of a deleted session (nothing to write), or of one Postgres has again
        // (restored from before its delete), whose tombstone went: written again from the start.
        if (result.deleted && (await dropRestoredTombstone(this.redis, this.prefix, database, sessionId)))
          continue;
        return;
      }
      if (result.diverged !== undefined)
        await this.dropIfStale(
          sessionId,
          result.last,
          result.diverged,
          await storedState(database, sessionId, result.last),
        );
    }
    throw new Error(`session ${sessionId}: the event stream kept moving while it was synced`);
  }
}

/** How far back `missingRunEnd` looks for a run's RUN_COMPLETED in a stream that has no `done`. */
const RECENT_ENTRIES = 20;
