/**
 * What each producer action takes, parsed where it crosses into the fleet: the bodies and
 * queries of FleetService's methods as zod schemas whose errors name the field (contracts
 * §4, §12), the list cursor, and the one-word session status.
 */
import { z } from "zod";
import type { SessionStatus } from "../shared/api-types.js";
import type { RunRow, SessionRow } from "../shared/db/schema.js";
import { RESUMABLE_TAIL_STATES } from "../shared/db/schema.js";
import { ValidationError } from "../shared/errors.js";
import { spentSchema } from "../shared/imported-spent.js";
import { isStorableText, toValidationError } from "../shared/messages.js";
import { parkedReasonFilterProblem } from "../shared/parked-reason-filter.js";
import type { ListCursor } from "../shared/store/session-queries.js";
import { MAX_IMPORTED_MESSAGES, MAX_METADATA_BYTES } from "./request-limits.js";

/**
 * `metadata`: a JSON object of at most MAX_METADATA_BYTES. Its size is read before anything
 * walks it, so a body of a million keys costs one JSON.stringify, not a parse of each.
 */
export const metadataField = z
  .unknown()
  .optional()
  .superRefine((value, ctx) => {
    if (value === undefined) return;
    if (value === null || typeof value !== "object" || Array.isArray(value)) {
      ctx.addIssue({ code: "custom", message: "must be a JSON object" });
    } else if (Buffer.byteLength(JSON.stringify(value)) > MAX_METADATA_BYTES) {
      ctx.addIssue({ code: "custom", message: `is larger than ${MAX_METADATA_BYTES / 1024} KiB as JSON` });
    }
  })
  .transform((value) => value as Record<string, unknown> | undefined);

/** An imported history's length, checked before its messages are parsed. */
export function importedCount(value: unknown, field: string): number {
  if (!Array.isArray(value)) return 0;
  if (value.length > MAX_IMPORTED_MESSAGES)
    throw new ValidationError(
      field,
      `holds more than ${MAX_IMPORTED_MESSAGES.toLocaleString("en")} messages`,
    );
  return value.length;
}

/**
 * zod's words for a field of the wrong type, or "is required" when it was left out (a message
 * of its own covers both: `afterSeq` left out read "must be a whole number ≥ 0").
 */
const requiredOr = (words: string) => ({
  error: (issue: { input?: unknown }) => (issue.input === undefined ? "is required" : words),
});

/**
 * POST /v1/sessions/:id/history: `messages` is checked as a history (parseHistory), after its
 * count. Not an array is said as POST /v1/sessions says it: an object, a string or null read
 * "must hold at least one message", as if an empty page had been sent.
 */
export const importPageBody = z.strictObject({
  afterSeq: z
    .number(requiredOr("must be a whole number ≥ 0"))
    .int("must be a whole number ≥ 0")
    .nonnegative("must be a whole number ≥ 0"),
  messages: z.array(z.unknown(), requiredOr("must be a JSON array of messages")),
});

/** false: the session's event stream (contracts §7) is not written; GET …/events answers 409. */
export const sessionEventsField = z.boolean("must be true or false").optional();
export const createBody = z.strictObject({
  agent: z.unknown(),
  metadata: metadataField,
  messages: z.unknown().optional(),
  sessionEvents: sessionEventsField,
  /** What the imported session spent beyond its history's steps (shared/imported-spent.ts). */
  spentOutsideHistory: spentSchema.optional(),
});
/** Sessions one batch may create. */
export const MAX_BATCH = 1_000;
export const batchItem = z.strictObject({
  agent: z.unknown(),
  metadata: metadataField,
  messages: z.unknown().optional(),
  input: z.string().min(1, "must be a non-empty string").max(1_000_000).optional(),
  customId: z
    .string()
    .min(1, "must be a non-empty string")
    .max(256, "is longer than 256 characters")
    .optional(),
  /** false: this session has no event stream, whatever the batch's setting (true is the batch's default). */
  sessionEvents: sessionEventsField,
});
/** Its refusal says how a bigger batch is sent (test/batch-too-many-sessions.test.ts). */
export const batchSessions = z
  .array(batchItem)
  .max(
    MAX_BATCH,
    `holds at most ${MAX_BATCH} sessions per request; a bigger batch is sent in parts: the first with \`open: true\`, the others to POST /v1/batches/:id/sessions (appendToBatch), the last with \`close: true\` (\`fleet batch submit\` does this)`,
  );
export const batchBody = z.strictObject({
  sessions: batchSessions.min(1, "must hold at least one session"),
  webhook: z.strictObject({ url: z.string().min(1, "must be a URL") }).optional(),
  /** An open batch takes more sessions (`POST /v1/batches/:id/sessions`) and does not end before it is closed. */
  open: z.boolean().optional(),
  /** For every session of the batch, also those appended later. */
  sessionEvents: sessionEventsField,
});
export const appendBody = z
  .strictObject({
    sessions: batchSessions,
    /** The last part: the batch takes no more sessions and may end. */
    close: z.boolean().optional(),
  })
  .refine((b) => b.sessions.length > 0 || b.close === true, {
    path: ["sessions"],
    message: "must hold at least one session (or close the batch with `close: true`)",
  });
/**
 * A whole number in a query string, written in decimal digits, from `min` to `max`. Read with
 * Number(), an empty or blank value was 0, `0x10` 16 and `1e1` 10, each taken without a word.
 */
function queryInt(min: number, max: number) {
  const message = `must be a whole number from ${min} to ${max.toLocaleString("en")}, in digits`;
  return z
    .string(message)
    .regex(/^\d{1,10}$/, message)
    .transform(Number)
    .pipe(z.number().min(min, message).max(max, message));
}
/**
 * A `parkedReason` filter: a known parked reason, alone or with its detail (parked-reason-filter.ts);
 * one that can match nothing (a typo) is a 400 naming the reasons, not an empty answer.
 */
export function parkedReasonFilter() {
  // No min(1): an empty value is said as any other unknown reason, not in zod's words.
  return z
    .string()
    .max(200)
    .superRefine((value, ctx) => {
      const problem = parkedReasonFilterProblem(value);
      if (problem) ctx.addIssue({ code: "custom", message: problem });
    });
}
export const LIST_STATUSES = ["parked", "active", "cancelled", "queued", "running", "completed"] as const;
export const listQuery = z
  .strictObject({
    status: z.enum(LIST_STATUSES).optional(),
    batch: z.string().min(1).max(200).optional(),
    parkedReason: parkedReasonFilter().optional(),
    before: z
      .string()
      .max(400)
      .transform((value, ctx) => {
        const cursor = decodeListCursor(value);
        if (!cursor)
          ctx.addIssue({ code: "custom", message: "is not a cursor this list gave (`nextCursor`)" });
        return cursor ?? z.NEVER;
      })
      .optional(),
    limit: queryInt(1, 1_000).default(100),
  })
  .superRefine((query, ctx) => {
    // Only a parked session has a parked reason: with another status the filter matched nothing
    // (session-list.ts adds status = 'parked'), an empty list that read as "none parked for it".
    if (query.parkedReason !== undefined && query.status !== undefined && query.status !== "parked")
      ctx.addIssue({
        code: "custom",
        path: ["parkedReason"],
        message: `only parked sessions have one, so with status=${query.status} it matches nothing: give status=parked or no status`,
      });
  });

/** The session list's `nextCursor`: opaque to clients (base64url of `micros.id`). */
export function encodeListCursor(cursor: ListCursor): string {
  return Buffer.from(`${cursor.micros}.${cursor.id}`, "utf8").toString("base64url");
}

/** A session id as the API makes them (a UUID), in either case. */
const SESSION_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** The last microsecond Postgres's timestamps and this cursor share: 9999-12-31T23:59:59.999999Z. */
export const MAX_CURSOR_MICROS = 253_402_300_799_999_999n;

export function decodeListCursor(value: string): ListCursor | undefined {
  const match = /^(\d{1,19})\.(.+)$/s.exec(Buffer.from(value, "base64url").toString("utf8"));
  if (!match || !isStorableText(match[2]!) || BigInt(match[1]!) > MAX_CURSOR_MICROS) return undefined;
  return { micros: match[1]!, id: match[2]! };
}
export const batchQuery = z.strictObject({ include: z.enum(["usage"]).optional() });
/** `GET /v1/batches/:id/results?after=SESSION_ID`: the lines after that session's (a reader that lost its connection reads on). */
export const batchResultsQuery = z.strictObject({
  // Every session id is a UUID, lower-case (session-creation.ts). Compared as text, anything
  // else read on from a place no line has: a customId answered fewer lines or none, in silence.
  after: z
    .string()
    .regex(SESSION_ID, "must be a session id (a result line's `sessionId`), not a customId")
    .transform((id) => id.toLowerCase())
    .optional(),
});
/** Most messages one `GET /v1/sessions/:id?limit=N` answers. */
export const MAX_SESSION_MESSAGES_PAGE = 10_000;
/** Most runs one `GET /v1/sessions/:id?runsLimit=N` answers; the page size when only `runsBefore` is given. */
export const MAX_SESSION_RUNS_PAGE = 1_000;
export const DEFAULT_SESSION_RUNS_PAGE = 100;
/**
 * `GET /v1/sessions/:id`: `afterSeq` only the messages after seq N (a reader that has them);
 * `limit` at most N of them (`nextAfterSeq` says where the next page starts); `runsLimit` only
 * the latest N runs, `runsBefore` the runs before a `nextRunsBefore` (older pages). Without
 * `limit`, `runsLimit` and `runsBefore` the answer is the whole session, as it always was.
 */
export const sessionQuery = z.strictObject({
  afterSeq: queryInt(0, 2 ** 31 - 1).optional(),
  limit: queryInt(1, MAX_SESSION_MESSAGES_PAGE).optional(),
  runsLimit: queryInt(0, MAX_SESSION_RUNS_PAGE).optional(),
  runsBefore: z
    .string()
    .max(400)
    .transform((value, ctx) => {
      const cursor = decodeListCursor(value);
      if (!cursor)
        ctx.addIssue({ code: "custom", message: "is not a cursor this route gave (`nextRunsBefore`)" });
      return cursor ?? z.NEVER;
    })
    .optional(),
});
export const sendBody = z.strictObject({
  content: z.string().min(1, "must be a non-empty string").max(1_000_000),
  /** Goal mode for this run only (contracts §8). */
  goal: z
    .strictObject({
      text: z.string().min(1, "must be a non-empty string").max(100_000),
      maxRounds: z
        .number()
        .int("must be a whole number")
        .min(1, "must be at least 1")
        .max(100, "must be at most 100"),
    })
    .optional(),
});
export const resumeBody = z.strictObject({ model: z.unknown().optional() }).optional();
/**
 * The body of a route that takes nothing but its path (`POST /v1/sessions/:id/cancel`,
 * `POST /v1/batches/:id/cancel`, `POST /v1/webhook-secret/rotate`, `DELETE /v1/sessions/:id`,
 * `DELETE /v1/batches/:id`): no body, or `{}` (clients send both). Any field is refused, a 400
 * naming it: before, every body was accepted and ignored, so `{"tenant": …}` rotated the
 * caller's own secret, `{"reason": …}` cancelled and `{"dryRun": true}` deleted.
 * route-docs-common.ts documents it (`noFieldsBody`).
 */
export const NO_FIELDS = z.strictObject({}).describe("No fields: send no body, or `{}` (a field is a 400)");
export const noFieldsBody = NO_FIELDS.optional();

export function parseBody<T>(schema: z.ZodType<T>, body: unknown): T {
  const result = schema.safeParse(body ?? undefined);
  if (!result.success) {
    const issue = result.error.issues[0];
    // The body itself is no object: said as what was sent (null read as undefined here).
    if (issue?.code === "invalid_type" && issue.path.length === 0)
      throw new ValidationError("", `the body must be a JSON object, ${bodyKind(body)}`);
    throw toValidationError("", result.error);
  }
  return result.data;
}

function bodyKind(body: unknown): string {
  if (body === undefined) return "and none was sent";
  if (body === null) return "not null";
  if (Array.isArray(body)) return "not an array";
  return `not a ${typeof body}`;
}

/** One word for a session: parked, cancelled, running, queued, completed, interrupted, stopped, empty. */
export function sessionStatus(
  session: Pick<SessionRow, "status" | "tailState">,
  runs: Pick<RunRow, "status">[],
): SessionStatus {
  if (session.status === "parked") return "parked";
  if (session.status === "cancelled") return "cancelled";
  if (runs.some((r) => r.status === "running")) return "running";
  if (runs.some((r) => r.status === "queued")) return "queued";
  if (session.tailState === "completed") return "completed";
  if (session.tailState === "empty") return "empty";
  if ((RESUMABLE_TAIL_STATES as readonly string[]).includes(session.tailState)) return "interrupted";
  return "stopped";
}
