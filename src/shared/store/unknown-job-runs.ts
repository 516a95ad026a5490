/**
 * The end of a run whose job no worker of the fleet could take: its name is one a newer
 * release added (a rolling deploy; newer-job-wait.ts hands such a job back until
 * FLEET_NEWER_AGENT_WAIT_MS has passed). The run ends `invalid_agent` with the reason, and its
 * session is parked with it (never forgotten) unless another run of it is on its way.
 */
import type { Database } from "../db/client.js";

/** What `endRunOfUnknownJob` did. `ended: false`: the run was not queued (or not the session's). */
export type UnknownJobEnd = { ended: false } | { ended: true; kind: "run" | "resume"; parked: boolean };

/**
 * Ends the queued run `runId` of `sessionId` `invalid_agent` with `detail` as its error, and
 * parks the session `invalid_agent: detail` when it is active and has no other run not ended.
 * The session's row is taken first, as every writer of a session and its runs takes it: a
 * worker starting that run, or a cancel ending it, goes wholly before or after this.
 */
export async function endRunOfUnknownJob(
  database: Database,
  target: { sessionId: string; runId: string },
  detail: string,
): Promise<UnknownJobEnd> {
  const { sessionId, runId } = target;
  return database.sql.begin(async (tx): Promise<UnknownJobEnd> => {
    const [session] = await tx`select 1 from sessions where id = ${sessionId} for no key update`;
    if (!session) return { ended: false };
    const [run] = await tx<{ kind: "run" | "resume" }[]>`
      update runs set status = 'ended', ended_reason = 'invalid_agent', error = ${detail}, ended_at = now()
       where id = ${runId} and session_id = ${sessionId} and status = 'queued'
      returning kind`;
    if (!run) return { ended: false };
    const parked = await tx`
      update sessions set status = 'parked', parked_reason = ${`invalid_agent: ${detail}`},
                          next_resume_at = null, updated_at = now()
       where id = ${sessionId} and status = 'active'
         and not exists (select 1 from runs where session_id = ${sessionId} and status <> 'ended')
      returning 1`;
    return { ended: true, kind: run.kind, parked: parked.length > 0 };
  });
}
