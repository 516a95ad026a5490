/**
 * A message waiting on a parked session: a run with new input that had not started when the
 * session was parked (its retries ran out while its job never started: AutomaticResumes.countRetry).
 * Its input is stored only in the run, so the run is kept; but it is no one's work until
 * someone acts (a claim skips a parked session). It does not make the session `running`
 * (its resume point says the message goes to the model: `call_model`), nor one of its
 * tenant's active sessions (active-sessions.ts); a new message runs it first, and an explicit
 * resume starts it (`startWaitingInput`), on the model the resume names if it names one.
 */
import type postgres from "postgres";
import type { ModelConfig } from "../agent-config.js";
import type { Database } from "../db/client.js";
import type { RunRow } from "../db/schema.js";
import { NotFoundError } from "../errors.js";
import type { ResumePoint } from "../resume-point.js";
import { holdActiveSessions } from "./active-sessions.js";
import { json, type RawRun, runFromRaw } from "./rows.js";
import { unparkSession } from "./run-queueing.js";

/** Where a session stands with a message waiting: the model is to answer it. */
export const WAITING_INPUT_POINT: ResumePoint = {
  resumable: true,
  kind: "call_model",
  cause: "awaiting_answer",
  unansweredToolCalls: [],
};

/**
 * Whether the session's runs not ended are only a message waiting on it parked: it is
 * parked and they are all queued runs with input (none is a resume, none is running).
 */
export async function hasWaitingInputOnly(
  sql: postgres.Sql | postgres.TransactionSql,
  sessionId: string,
): Promise<boolean> {
  const [row] = await sql<{ waiting: boolean }[]>`
    select (s.status = 'parked'
            and exists (select 1 from runs r where r.session_id = s.id and r.status <> 'ended')
            and not exists (select 1 from runs r where r.session_id = s.id and r.status <> 'ended'
                              and not (r.status = 'queued' and r.kind = 'run'))) as waiting
      from sessions s where s.id = ${sessionId}`;
  return row?.waiting === true;
}

/**
 * The parked reason of the session a queued run waits on, while the session is parked (what
 * `GET /v1/runs/:id` says as `sessionParkedReason`); null when it is not parked.
 */
export async function parkedReasonOf(
  sql: postgres.Sql | postgres.TransactionSql,
  sessionId: string,
): Promise<string | null> {
  const [row] = await sql<{ reason: string | null }[]>`
    select coalesce(parked_reason, 'parked') as reason from sessions where id = ${sessionId} and status = 'parked'`;
  return row?.reason ?? null;
}

/**
 * Someone resumed a parked session on which a message waits: the session is active again
 * (its count of automatic resumes starts over) and that message is its next run, with
 * `model` in the agent's model's place when one is named (for every message waiting). Under
 * the session's row lock, taken after the tenant's active-session lock as `createRun` takes
 * them; the session becomes active again, so the cap is checked for it. Null when the session
 * is no longer so (someone else acted meanwhile, or it was cancelled): the caller goes on as
 * for any explicit resume.
 */
export async function startWaitingInput(
  database: Database,
  sessionId: string,
  options: { tenant: string; maxActiveSessions?: number | undefined; model?: ModelConfig | undefined },
): Promise<RunRow | null> {
  const { tenant, maxActiveSessions: max, model } = options;
  return database.sql.begin(async (tx) => {
    if (max !== undefined) await holdActiveSessions(tx, tenant, 1, max, sessionId);
    const [session] = await tx<{ batch_id: string | null }[]>`
      select batch_id from sessions where id = ${sessionId} for no key update`;
    if (!session) throw new NotFoundError(`session ${sessionId}`);
    if (session.batch_id !== null) {
      const [gone] =
        await tx`select 1 from batches where id = ${session.batch_id} and deleted_at is not null`;
      if (gone) throw new NotFoundError(`session ${sessionId}`);
    }
    if (!(await hasWaitingInputOnly(tx, sessionId))) return null;
    await unparkSession(tx, sessionId);
    if (model)
      await tx`
        update runs set model = ${JSON.stringify(model)}::jsonb
         where session_id = ${sessionId} and kind = 'run' and (status = 'queued') is true`;
    const [next] = await tx<{ r: string | RawRun }[]>`
      select row_to_json(r) as r from runs r
       where r.session_id = ${sessionId} and (r.status = 'queued') is true
       order by r.queue_seq, r.created_at, r.id limit 1`;
    return next ? runFromRaw(json<RawRun>(next.r)) : null;
  });
}
