/**
 * The runs deletes found running (`deleted_runs`, written by data-deletion.ts in the statement
 * that deleted their session), read and forgotten by the sweeper (sweeper/deleted-runs.ts).
 */
import type { Database } from "../db/client.js";

/** A run a delete found running: its session is gone. */
export type DeletedRun = { runId: string; sessionId: string };

export class DeletedRuns {
  constructor(private readonly database: Database) {}

  /**
   * Up to `limit` runs deleted more than `olderThanMs` ago (Postgres's clock), by id after
   * `after` (a page of a round through them all: a big batch's may be more than a page).
   */
  async due(olderThanMs: number, limit: number, after = ""): Promise<DeletedRun[]> {
    const rows = await this.database.sql<{ run_id: string; session_id: string }[]>`
      select run_id, session_id from deleted_runs
       where deleted_at < now() - make_interval(secs => ${olderThanMs / 1000}) and run_id > ${after}
       order by run_id limit ${limit}`;
    return rows.map((r) => ({ runId: r.run_id, sessionId: r.session_id }));
  }

  /** These runs no longer run (their session's lease was released or lapsed): nothing more to send. */
  async forget(runIds: readonly string[]): Promise<void> {
    if (runIds.length === 0) return;
    const { sql } = this.database;
    await sql`delete from deleted_runs where run_id in ${sql([...runIds])}`;
  }
}
