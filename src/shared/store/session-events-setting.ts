/**
 * A session's `sessionEvents` after its creation (`PATCH /v1/sessions/:id`): whether its event
 * stream is written. Workers read it when they claim the session (one job: its runs until the
 * queue is empty), the sweeper and the API each time they would write, readers every second.
 */
import type { Database } from "../db/client.js";
import { notInDeletedBatch } from "./deleted-batches.js";

export type EventsSettingChange =
  | { outcome: "not_found" }
  /** Asked for a stream in a batch created with `sessionEvents: false`: nothing changed. */
  | { outcome: "refused" }
  | { outcome: "set" };

export class SessionEventsSetting {
  constructor(private readonly database: Database) {}

  /**
   * Sets it, in one statement. A batch created with `sessionEvents: false` promised that none
   * of its sessions has a stream: turning one on is refused, as it is at creation.
   */
  async set(tenant: string, sessionId: string, on: boolean): Promise<EventsSettingChange> {
    const { sql } = this.database;
    const [row] = await sql<{ refused: boolean }[]>`
      with s as (
        select s.id,
               ${on}::boolean and coalesce((select not b.session_events from batches b
                                             where b.id = s.batch_id), false) as refused
          from sessions s
         where s.id = ${sessionId} and s.tenant = ${tenant} and ${notInDeletedBatch(sql, "s")}
      ), u as (
        update sessions set session_events = ${on}
         where id = (select id from s where not refused)
        returning id
      )
      select s.refused from s`;
    if (!row) return { outcome: "not_found" };
    if (row.refused) return { outcome: "refused" };
    return { outcome: "set" };
  }

  /** Whether it is on; null when the session is not (or no longer) the tenant's. */
  async isOn(sessionId: string, tenant: string): Promise<boolean | null> {
    const { sql } = this.database;
    const [row] = await sql<{ on: boolean }[]>`
      select s.session_events as on from sessions s
       where s.id = ${sessionId} and s.tenant = ${tenant} and ${notInDeletedBatch(sql, "s")}`;
    return row ? row.on : null;
  }
}
