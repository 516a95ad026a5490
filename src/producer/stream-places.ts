/**
 * Where a reader's event stream starts (contracts §7): the id it resumes after
 * (`Last-Event-ID` or `?after=`), a session stream's start without one, and the 410 for a
 * place no longer kept.
 */
import type { FastifyReply, FastifyRequest } from "fastify";
import { NotFoundError, ValidationError } from "../shared/errors.js";
import { compareIds, STREAM_START } from "../shared/event-expiry.js";
import type { EventReader } from "../shared/event-reader.js";
import { canonicalEventId, isEventId } from "../shared/events.js";
import type { SessionQueries } from "../shared/store/session-queries.js";
import { unfindableId } from "./request-checks.js";

/**
 * Where a reader starts, and what its first read must still find (event-stream.ts):
 * - `entry`: an entry of the stream (an id the reader sent, found kept at connect, or the
 *   stream's newest entry then); read after it, and it must still be kept, or trimmed with
 *   nothing after it gone.
 * - `at`: an entry read from, itself included (a run's `RUN_STARTED`), held to the same.
 * - `start`: the stream's start (`0-0`), found untrimmed at connect: a first read that finds
 *   it trimmed since may have missed what went.
 * - `kept`: from what is kept, whatever went before (a named run whose `RUN_STARTED` is no
 *   longer kept; a stream that did not exist at connect; a batch's stream read without an id).
 */
export type StartPlace = { id: string; kind: "entry" | "at" | "start" | "kept" };

/** The place of a reader that sent an id to resume after (found kept). */
export function sentPlace(after: string): StartPlace {
  return { id: after, kind: after === STREAM_START ? "start" : "entry" };
}

/**
 * Whether a reader of a batch's stream resuming after `after` has nothing left to read (pure):
 * the stream's newest entry is its BATCH_COMPLETED, at or before `after`. No SESSION_ENDED
 * follows it (each session's first end only, all written before it), and a reader open then
 * is ended after it (event-stream-serve.ts). Such a reader is answered 204 No Content, which
 * tells an event-stream client to stop reconnecting (batchEvents() returns): it was held
 * open with heartbeats for ever, and `batchEvents(id, { after })` waited with it.
 */
export function batchReadToEnd(newest: { id: string; type: string } | null, after: string | null): boolean {
  return after !== null && newest?.type === "BATCH_COMPLETED" && compareIds(newest.id, after) <= 0;
}

/**
 * The id to resume after: `Last-Event-ID` wins over `?after=`; 400 when malformed.
 * `params`: the other query parameters the route takes.
 */
export function resumeId(request: FastifyRequest, params: readonly string[] = []): string | null {
  const header = request.headers["last-event-id"];
  const fromHeader = Array.isArray(header) ? header[0] : header;
  const query = (request.query ?? {}) as Record<string, unknown>;
  for (const key of Object.keys(query))
    if (key !== "after" && !params.includes(key))
      throw new ValidationError(key, "is not a parameter of this route");
  const [field, value] =
    fromHeader !== undefined && fromHeader !== "" ? ["Last-Event-ID", fromHeader] : ["after", query.after];
  if (value === undefined) return null;
  if (typeof value !== "string" || !isEventId(value))
    throw new ValidationError(field, "must be an event id as the stream sent it (e.g. 1700000000000-0)");
  return canonicalEventId(value);
}

/** How far ahead of this API's clock Redis's (which stamps the ids) may be taken to run. */
const CLOCK_MARGIN_MS = 60_000;

/**
 * What a 410 `expired` says of the reader's place `after` (pure), given the stream's newest
 * entry now (`newest`, null: none) and this API's clock. A place past the newest entry is one
 * this stream never sent (from a stream since lost, or made up): it was told it was "older than
 * the events kept", of `99999999999999-0`, an id of the year 5138.
 */
export function goneMessage(after: string, newest: string | null, nowMs: number): string {
  const ms = Number(after.split("-")[0]);
  const date = new Date(ms);
  const time = Number.isNaN(date.getTime()) ? "past any date" : date.toISOString();
  const toCome = ms > nowMs + CLOCK_MARGIN_MS ? `; its time, ${time}, has not come` : "";
  const past = newest === null ? toCome !== "" : compareIds(after, newest) > 0;
  if (past)
    return `event ${after} is past the newest event of this stream (${newest ?? "it has none"}): not an id this stream sent${toCome}; one from a stream since lost (Redis or Postgres restored from a backup), or made up; reconnect without an id`;
  return `event ${after} is older than the events kept (FLEET_EVENTS_MAX, FLEET_EVENTS_MAX_AGE_MS, FLEET_EVENTS_MAX_BYTES), or from a stream since lost (Redis or Postgres restored from a backup); reconnect without an id`;
}

/**
 * 410 `expired`: the reader's place is no longer kept, or was never this stream's (past its
 * newest entry, `newest`); it reconnects without an id.
 */
export function gone(reply: FastifyReply, after: string, newest: string | null): FastifyReply {
  return reply.code(410).send({
    error: { code: "gone", reason: "expired", message: goneMessage(after, newest, Date.now()) },
  });
}

/**
 * Where a session stream starts without an id to resume after: the `RUN_STARTED` of `?run=`'s
 * run or of the latest run (of the run running ahead of it while it is queued), else the end.
 */
export async function sessionStreamStart(
  reader: EventReader,
  queries: Pick<SessionQueries, "lastRun">,
  key: string,
  sessionId: string,
  tenant: string,
  runParam: string | undefined,
): Promise<StartPlace> {
  // The end first, then the runs: a run that starts in between is found by its RUN_STARTED.
  const tail = await reader.lastId(key);
  // `?run=`: that run's (a client following the run its message queued, while other
  // messages may queue runs after it); else the latest run's. Only those runs are read: a
  // session used for days has thousands, and each reader connecting read them all.
  const run = await queries.lastRun(sessionId, tenant, runParam === undefined ? {} : { id: runParam });
  // Quoted when it is empty or holds a space or an invisible character (request-checks.ts).
  if (runParam !== undefined && !run)
    throw new NotFoundError(`run ${unfindableId(runParam) ?? runParam} of session ${sessionId}`);
  // While the latest run waits behind one of the session's runs that is still running (a
  // message sent during a run), the stream starts at the RUN_STARTED of that running run:
  // its remaining events come before the queued run's RUN_STARTED, and starting at the end
  // would hand the reader the tail of a run it never saw start (contracts §7).
  const ahead =
    runParam === undefined && run?.status === "queued"
      ? await queries.lastRun(sessionId, tenant, { status: "running" })
      : undefined;
  const from = ahead ?? run;
  const startedId = from && from.status !== "queued" ? await reader.runStartedId(sessionId, from.id) : null;
  if (startedId) return { id: startedId, kind: "at" };
  // A named run that ended without starting (a cancel dropped it while queued) has one event,
  // its RUN_COMPLETED: from there. Taken for a run whose RUN_STARTED is no longer kept, it was
  // read from the first event kept, and its reader got every earlier run's events as its own.
  if (runParam !== undefined && run?.status === "ended" && run.startedAt === null) {
    const endedId = await reader.runEndedId(sessionId, run.id, run.createdAt.getTime() - CLOCK_MARGIN_MS);
    if (endedId) return { id: endedId, kind: "at" };
  }
  // A named run that started but whose RUN_STARTED is no longer kept: from the first event
  // kept, so that its reader still gets the rest of that run (the end would give nothing).
  const fromKept = runParam !== undefined && run?.status !== "queued";
  return fromKept || tail === null ? { id: STREAM_START, kind: "kept" } : { id: tail, kind: "entry" };
}
