/**
 * `POST /v1/batches/:id/resume`: an explicit resume of a batch's parked sessions, one page at
 * a time — what an operator does after fixing what parked them (a revoked key that parked a
 * batch `provider_rejected`, a provider outage that ended in `attempts_exhausted`), instead
 * of one `POST /v1/sessions/:id/resume` per session.
 *
 * Each session goes through the one explicit resume (`FleetService.resume`): the same checks
 * (a session with nothing to resume is refused with its reason and stays parked), the same
 * run and job, the same per-tenant limits. The page walks the batch's parked sessions in the
 * session list's keyset order (newest activity first) from `cursor`, so a session refused
 * here is not met again on the next page, and one that parks again while the pages are read
 * (it failed once more) is not resumed twice in one pass: a pass ends when `nextCursor` is
 * null. When a tenant limit stops a page part-way, the page answers what it did, with
 * `retryAfterSeconds` and a `nextCursor` at the first session not done. A session deleted
 * between the page's read and its resume is passed over.
 */
import { z } from "zod";
import type { BatchResumePage } from "../shared/api-types.js";
import { AgentResumeError, NotFoundError, TooManyRequestsError, ValidationError } from "../shared/errors.js";
import type { ResumeKind } from "../shared/resume-reasons.js";
import type { ListCursor } from "../shared/store/session-queries.js";
import { parkedReasonFilter } from "./request-bodies.js";

export type { BatchResumePage };

export const DEFAULT_BATCH_RESUME_LIMIT = 200;

const LIMIT_WORDS = "must be a whole number from 1 to 1,000";

export const batchResumeBody = z
  .strictObject({
    /** Only sessions parked for this reason (`provider_rejected`, or with its detail). */
    parkedReason: parkedReasonFilter().optional(),
    /** Resume with this MODEL instead of the agent's (checked once, as for one session). */
    model: z.unknown().optional(),
    /** The `nextCursor` of the previous page. */
    cursor: z.string().min(1).max(400).optional(),
    // Said as the session list says its `limit`, not in zod's words ("expected int, received
    // number", "Too small: expected number to be >=1").
    limit: z
      .number({ error: LIMIT_WORDS })
      .int(LIMIT_WORDS)
      .min(1, LIMIT_WORDS)
      .max(1_000, LIMIT_WORDS)
      .default(DEFAULT_BATCH_RESUME_LIMIT),
  })
  .optional();

export type BatchResumeDeps = {
  /** The batch's parked sessions after `after` in the list's order, at most `limit`. */
  parked(after: ListCursor | undefined, limit: number): Promise<{ id: string; cursor: ListCursor }[]>;
  /** The explicit resume of one session. */
  resume(sessionId: string): Promise<{ runId: string; kind: ResumeKind }>;
  encode(cursor: ListCursor): string;
};

/** One page: every parked session of it resumed or refused, in order (see the file comment). */
export async function resumeParkedPage(
  deps: BatchResumeDeps,
  after: ListCursor | undefined,
  limit: number,
): Promise<BatchResumePage> {
  const rows = await deps.parked(after, limit);
  const page: BatchResumePage = { resumed: [], refused: [], nextCursor: null };
  let done = after;
  for (const row of rows) {
    try {
      page.resumed.push({ sessionId: row.id, ...(await deps.resume(row.id)) });
    } catch (error) {
      if (error instanceof AgentResumeError) {
        page.refused.push({ sessionId: row.id, reason: error.reason });
      } else if (error instanceof NotFoundError) {
        // Deleted after the page was read (DELETE /v1/sessions/:id): no longer one of the
        // batch's sessions, so passed over. Answering 404 would hide the sessions resumed
        // before it, and the caller could not tell which those were.
      } else if (error instanceof TooManyRequestsError && done !== undefined && done !== after) {
        // Part of the page is done: say so, and where to go on once the limit allows.
        return { ...page, nextCursor: deps.encode(done), retryAfterSeconds: error.retryAfterSeconds };
      } else if (error instanceof ValidationError && done !== undefined && done !== after) {
        // A session the request cannot resume as asked (its agent's cost budget needs a price
        // the model lacks, or it lists more tools than the model takes): the page answers what it did, and the request for the next page,
        // which starts at that session, gets the 400 with nothing done.
        return { ...page, nextCursor: deps.encode(done) };
      } else {
        throw error;
      }
    }
    done = row.cursor;
  }
  page.nextCursor = rows.length === limit && done !== undefined ? deps.encode(done) : null;
  return page;
}
