/**
 * A session's bound on runs waiting to start (FLEET_SESSION_MAX_QUEUED_RUNS): each queued
 * run holds its input (up to 1 MB) until a worker takes it, and the active-session cap
 * counts a session once however many runs it has, so without this one session could pile
 * up any number of them (200 sends of 100 KB: 20 MB waiting, no 429). Checked in the
 * transaction that queues the run, after the session row is locked (run-queueing.ts), so
 * concurrent sends to one session cannot together go past it.
 */
import type postgres from "postgres";
import { TooManyRequestsError } from "../errors.js";

/** What a 429 for queued runs asks the caller to wait: a worker takes them on its own time. */
export const QUEUED_RETRY_AFTER_SECONDS = 5;

/**
 * Refuses (TooManyRequestsError) one more run with input for `sessionId` when `max` of its
 * runs with input are already queued and not yet taken by a worker. The caller holds the
 * session row's lock.
 */
export async function checkQueuedRuns(
  tx: postgres.TransactionSql,
  sessionId: string,
  max: number,
): Promise<void> {
  // Counted from runs_session_state_idx (session_id, status, …), stopping at `max`. Only runs
  // never started: one its worker handed back (capacity-waits.ts) is `queued` again with its
  // input already in the history, by a statement that checks no bound. Counted, it came back
  // on top of a send that had taken its place while it ran (2 counted of a bound of 1), and a
  // send to a session whose only run waited for capacity was refused
  // (test/queued-runs-hand-back.test.ts). The same runs history-room.ts counts as waiting.
  const [row] = await tx<{ n: number }[]>`
    select count(*)::int as n from (
      select 1 from runs where session_id = ${sessionId} and status = 'queued' and kind = 'run'
         and started_at is null limit ${max}
    ) q`;
  const queued = row?.n ?? 0;
  if (queued < max) return;
  throw new TooManyRequestsError(
    "queued_runs",
    QUEUED_RETRY_AFTER_SECONDS,
    `session ${sessionId} may have at most ${max} runs waiting to start (FLEET_SESSION_MAX_QUEUED_RUNS); ` +
      `${queued} are queued, so this message does not fit until a worker takes one`,
  );
}
