/**
 * Where an interrupted session stands, read under its row lock: what automatic-resumes.ts
 * decides a resume or a retry on (`readStand`).
 */
import { createHash } from "node:crypto";
import type postgres from "postgres";
import type { ModelConfig } from "../agent-config.js";
import type { Message, StoredMessage } from "../messages.js";
import {
  CANCELLED_BEFORE_START_TEXT,
  CANCELLED_WHILE_RUNNING_PREFIX,
  INTERRUPTED_TOOL_TEXT,
  INVALID_ARGUMENTS_PREFIX,
  UNAVAILABLE_TOOL_PREFIX,
  UNAVAILABLE_TOOL_SUFFIX,
} from "../resume-plan.js";
import { continuedWithText, progressMark } from "../resume-policy.js";
import { PRIMARY_REJECTED_PREFIX, WORKER_STOPPED_ERROR } from "../run-outcomes.js";
import { readHistory, readShapeAndLastSeq } from "./history-reads.js";

type Locked = {
  status: string;
  agent: unknown;
  last_seq: number;
  resume_attempts: number;
  attempt_point: string | null;
  attempt_seq: number;
  tool_ran: boolean;
  /** Automatic continuations since the latest run someone asked for started (resume-policy.ts). */
  continuations: number;
  /** Automatic resumes of any kind since the latest run someone asked for started (resume-policy.ts). */
  automatic_resumes: number;
  /** The last run ended by its worker's graceful stop, which handed the session over (resume-policy.ts `handover`). */
  handover: boolean;
  /** Runs so ended since the latest run someone asked for started, that one included. */
  handovers: number;
  next_resume_at: string | null;
  last_outcome: string | null;
  /** The last run was the agent's primary model, refused for good (run-outcomes.ts PRIMARY_REJECTED_PREFIX). */
  primary_rejected: boolean;
  /** The model named by the latest run someone asked for, when that was a resume (resume-policy.ts `askedModel`). */
  asked_model: ModelConfig | string | null;
  /** Postgres's clock: `next_resume_at` is compared with it (sweep-queries.ts), whoever wrote it. */
  db_now: string;
};

/** `history`: the stored history's shape (history-reads.ts `readHistoryShape`), its last message whole. */
export type Stand = { session: Locked; history: Message[]; mark: string; progressed: boolean };

/**
 * Locks the session row and reads where it stands: its history, the mark of that point,
 * and whether it progressed since the last counted attempt — both moved to another point
 * (resume-policy.ts `progressMark`) and got a tool to run to its end (not a result the
 * runtime wrote for an interrupted or cancelled call, nor for one it refused without running
 * anything: a tool the agent does not list, arguments the tool's schema rejects). Either
 * alone can repeat forever: a poison tool after calls that run again, a model whose answers
 * keep breaking, or one that asks for a tool under a new invented name before each failure. A
 * response cut by the output limit again, with new text since the last counted attempt,
 * progressed too (`continuedWithText`): a long answer is continued at once, however many
 * parts it takes, up to `maxTurns` automatic continuations (`decideResume`).
 */
export async function readStand(tx: postgres.TransactionSql, sessionId: string): Promise<Stand | undefined> {
  const [session] = await tx<Locked[]>`
    select s.status, s.agent, s.last_seq, s.resume_attempts, s.attempt_point, s.attempt_seq, s.next_resume_at, now() as db_now,
           exists (select 1 from messages m where m.session_id = s.id and m.seq > s.attempt_seq
                     and m.role = 'tool' and not (m.success = false and (
                           m.content in (${INTERRUPTED_TOOL_TEXT}, ${CANCELLED_BEFORE_START_TEXT})
                           or starts_with(m.content, ${CANCELLED_WHILE_RUNNING_PREFIX})
                           or starts_with(m.content, ${INVALID_ARGUMENTS_PREFIX})
                           or (starts_with(m.content, ${UNAVAILABLE_TOOL_PREFIX})
                               and right(m.content, ${UNAVAILABLE_TOOL_SUFFIX.length}) = ${UNAVAILABLE_TOOL_SUFFIX})))) as tool_ran,
           (select r.ended_reason from runs r where r.session_id = s.id and r.status = 'ended'
             order by r.ended_at desc nulls last limit 1) as last_outcome,
           coalesce((select r.model is null and r.ended_reason = 'provider_error'
                            and starts_with(r.error, ${PRIMARY_REJECTED_PREFIX})
                       from runs r where r.session_id = s.id and r.status = 'ended'
                      order by r.ended_at desc nulls last limit 1), false) as primary_rejected,
           coalesce((select r.ended_reason = 'cancelled' and r.error = ${WORKER_STOPPED_ERROR}
                       from runs r where r.session_id = s.id and r.status = 'ended'
                      order by r.ended_at desc nulls last limit 1), false) as handover,
           (select r.model from runs r where r.session_id = s.id and r.started_at is not null
               and (r.kind = 'run' or r.trigger not in ('sweeper', 'worker'))
             order by r.started_at desc limit 1) as asked_model,
           c.continuations, c.automatic_resumes, h.handovers
      from sessions s
      cross join lateral (
        select coalesce((select max(a.started_at) from runs a where a.session_id = s.id
                 and (a.kind = 'run' or a.trigger not in ('sweeper', 'worker'))), '-infinity') as at) asked
      cross join lateral (
        select (count(*) filter (where c.resume_kind = 'continue_response'))::int as continuations,
               count(*)::int as automatic_resumes
          from runs c where c.session_id = s.id and c.kind = 'resume' and c.trigger in ('sweeper', 'worker')
           and c.created_at > asked.at) c
      cross join lateral (
        select count(*)::int as handovers from runs h
         where h.session_id = s.id and h.status = 'ended' and h.ended_reason = 'cancelled'
           and h.error = ${WORKER_STOPPED_ERROR} and h.started_at >= asked.at) h
     where s.id = ${sessionId} for no key update of s`;
  if (!session) return undefined;
  // Not the texts of a history that may be many MB, read under the session's lock: its point
  // needs only its shape, the mark and a continuation's text only its last message.
  const { shape: history, lastSeq } = await readShapeAndLastSeq(tx, sessionId);
  const last: StoredMessage | undefined =
    lastSeq === 0 ? undefined : (await readHistory(tx, sessionId, lastSeq - 1, 1))[0];
  if (last) history[history.length - 1] = last;
  const mark = createHash("sha256").update(progressMark(history)).digest("base64url");
  const progressed =
    (session.tool_ran && session.attempt_point !== mark) ||
    continuedWithText(last ? [last] : [], session.attempt_seq);
  return { session, history, mark, progressed };
}
