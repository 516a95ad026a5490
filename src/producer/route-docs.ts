/**
 * The `/v1` routes as documented: for each, what it takes and its answers by status
 * (api-schemas.ts has the schemas). openapi.ts turns this table into the OpenAPI document and
 * the routes' Fastify schemas; the tests check real answers against it.
 */
import { z } from "zod";
import { SESSION_STATUSES } from "../shared/api-types.js";
import {
  appendBatchBody,
  batchCreated,
  batchEventSchema,
  batchResultSchema,
  batchResumeBody,
  batchSchema,
  createBatchBody,
  createSessionBody,
  errorSchema,
  eventsHeaders,
  eventsQuery,
  gone,
  id,
  importPageBody,
  listQuery,
  resumeBody,
  resumePointSchema,
  runSchema,
  sendBody,
  sessionEventSchema,
  sessionEventsQuery,
  sessionPatchBody,
  sessionSchema,
  sessionSummarySchema,
  usageTotalsSchema,
} from "./api-schemas.js";
import {
  DEFAULT_SESSION_RUNS_PAGE,
  MAX_SESSION_MESSAGES_PAGE,
  MAX_SESSION_RUNS_PAGE,
} from "./request-bodies.js";

/** One answer of a route: its body (as `media`, JSON unless said) and the headers it sets. */
export type ResponseDoc = {
  description: string;
  schema?: z.ZodType;
  /** The body's media type when it is not `application/json`. */
  media?: string;
  headers?: Record<string, { description: string; type: "string" | "integer" }>;
};

/** One documented route: what it takes and its answers by status. */
export type RouteDoc = {
  /** The operation's name: the FleetClient method that calls it (client.ts), for generated clients too. */
  operationId: string;
  summary: string;
  body?: z.ZodType;
  /**
   * The body may be left out, or sent empty with `Content-Type: application/json` (the same):
   * the document says `requestBody.required: false` (openapi.ts), which @fastify/swagger
   * cannot say by itself.
   */
  optionalBody?: true;
  querystring?: z.ZodType;
  /** Request headers the route reads (Idempotency-Key, Last-Event-ID). */
  headers?: z.ZodType;
  idParam?: string;
  responses: Record<number, ResponseDoc>;
};

const common = {
  400: { description: "Bad input; `field` names where", schema: errorSchema },
  401: { description: "No valid API key", schema: errorSchema },
  403: {
    description:
      "No API key exists yet (dev mode) and the request was not addressed to a loopback name (`Host`)",
    schema: errorSchema,
  },
  408: {
    description:
      "The request (headers and body) did not arrive whole within FLEET_API_REQUEST_TIMEOUT_MS; the connection is closed",
    schema: errorSchema,
  },
  429: {
    description:
      'Over a tenant limit (`limit` names it), or too many failed authentications from the client\'s address (`limit: "auth_failures"`); see Retry-After',
    schema: errorSchema,
    headers: {
      "Retry-After": { description: "Seconds to wait before sending the request again", type: "integer" },
    },
  },
  500: {
    description: "An unexpected failure (`internal`); the API's log has it, the answer no internals",
    schema: errorSchema,
  },
  503: {
    description:
      "Postgres or Redis is unreachable or refusing work (`unavailable`); try again after Retry-After",
    schema: errorSchema,
    headers: {
      "Retry-After": { description: "Seconds to wait before sending the request again", type: "integer" },
    },
  },
} satisfies Record<number, ResponseDoc>;

/**
 * A `POST` route: it takes an Idempotency-Key (contracts §9: 409 when reused with another
 * body), and its body is JSON of at most 16 MiB (Fastify answers 413 and 415 before the
 * route sees it).
 */
function post(doc: RouteDoc): RouteDoc {
  return {
    ...doc,
    headers: z.object({
      "Idempotency-Key": z
        .string()
        .regex(/^[\x21-\x7e]{1,255}$/)
        .optional()
        .describe(
          "1 to 255 visible ASCII characters, kept per tenant for 24 h: a retry with the same key, path and body returns the first answer (`idempotent-replayed: true`) and acts once",
        ),
    }),
    responses: {
      409: { description: "The Idempotency-Key was used with another body (`reason`)", schema: errorSchema },
      ...doc.responses,
      413: { description: "The body is larger than 16 MiB", schema: errorSchema },
      415: {
        description:
          "The body is not sent as `application/json`, declares a charset other than UTF-8, or is compressed (`Content-Encoding`)",
        schema: errorSchema,
      },
    },
  };
}
/**
 * A `DELETE` route: it takes an Idempotency-Key too (a retry with the same key returns the
 * first answer, where a retry without one would get 404); it has no body.
 */
function del(doc: RouteDoc): RouteDoc {
  const { headers } = post(doc);
  return {
    ...doc,
    headers,
    responses: {
      409: {
        description: "The Idempotency-Key was used with another request (`reason`)",
        schema: errorSchema,
      },
      ...doc.responses,
    },
  };
}
const missing = { 404: { description: "No such id (or another tenant's)", schema: errorSchema } };
const conflict = {
  409: { description: "The Idempotency-Key was used with another body (`reason`)", schema: errorSchema },
};

/** Every `/v1` route, by `METHOD path` as Fastify registers it. */
export const ROUTE_DOCS: Record<string, RouteDoc> = {
  "POST /v1/sessions": post({
    operationId: "createSession",
    summary: "Create a session (optionally importing a history)",
    body: createSessionBody,
    responses: { 201: { description: "Created", schema: z.object({ id }) }, ...common, ...conflict },
  }),
  "POST /v1/batches": post({
    operationId: "createBatch",
    summary: "Create a batch of up to 1,000 sessions, all or none; those with `input` get a run",
    body: createBatchBody,
    responses: { 201: { description: "Created", schema: batchCreated }, ...common, ...conflict },
  }),
  "POST /v1/batches/:id/sessions": post({
    operationId: "appendToBatch",
    summary: "Add up to 1,000 sessions to an open batch; `close: true` with the last part",
    idParam: "batch id",
    body: appendBatchBody,
    responses: {
      201: { description: "Added", schema: batchCreated },
      ...common,
      ...missing,
      409: { description: "The batch is closed, or the Idempotency-Key was reused", schema: errorSchema },
    },
  }),
  "GET /v1/batches/:id": {
    operationId: "getBatch",
    summary: "A batch: status and counts by the sessions' current state",
    idParam: "batch id",
    querystring: z.strictObject({
      include: z.enum(["usage"]).optional().describe("`usage`: add the sessions' usage and cost summed"),
    }),
    responses: {
      200: { description: "The batch", schema: batchSchema.extend({ usage: usageTotalsSchema.optional() }) },
      ...common,
      ...missing,
    },
  },
  "GET /v1/batches/:id/results": {
    operationId: "batchResults",
    summary: "One NDJSON line per session (application/x-ndjson), streamed",
    idParam: "batch id",
    querystring: z.strictObject({
      after: z
        .string()
        .min(1)
        .max(200)
        .optional()
        .describe("A session id: only the lines after that session's (a read that broke goes on)"),
    }),
    responses: {
      200: {
        description: "Lines of BatchResult, in session-id order",
        schema: batchResultSchema,
        media: "application/x-ndjson",
      },
      ...common,
      ...missing,
    },
  },
  "GET /v1/batches/:id/events": {
    operationId: "batchEvents",
    summary:
      "Server-Sent Events (text/event-stream): SESSION_ENDED for each session that reaches a terminal state, then BATCH_COMPLETED",
    idParam: "batch id",
    querystring: eventsQuery,
    headers: eventsHeaders,
    responses: {
      200: {
        description:
          "An event stream: `id:` (resume with Last-Event-ID or ?after=), `event:` (the type), `data:` (a BatchEvent)",
        schema: batchEventSchema,
        media: "text/event-stream",
      },
      ...common,
      ...missing,
      ...gone,
    },
  },
  "GET /v1/sessions/:id/events": {
    operationId: "events",
    summary:
      "Server-Sent Events (text/event-stream) of what the session does; without an id, from the RUN_STARTED of its latest run",
    idParam: "session id",
    querystring: sessionEventsQuery,
    headers: eventsHeaders,
    responses: {
      200: {
        description:
          "An event stream: `id:` (strictly increasing; resume with Last-Event-ID or ?after=), `event:` (the type), `data:` (a SessionEvent); `: heartbeat` comments while idle",
        schema: sessionEventSchema,
        media: "text/event-stream",
      },
      ...common,
      ...missing,
      409: {
        description:
          'The session was created with `sessionEvents: false` (`reason: "session_events_off"`): it has no event stream',
        schema: errorSchema,
      },
      ...gone,
    },
  },
  "POST /v1/batches/:id/cancel": post({
    operationId: "cancelBatch",
    summary: "Cancel every session of the batch that has not ended",
    idParam: "batch id",
    responses: { 202: { description: "Cancelled", schema: batchSchema }, ...common, ...missing, ...conflict },
  }),
  "POST /v1/batches/:id/resume": post({
    operationId: "resumeBatch",
    summary:
      "Resume the batch's parked sessions, a page at a time (optionally only those parked for one reason, or with another model)",
    idParam: "batch id",
    body: batchResumeBody,
    optionalBody: true,
    responses: {
      202: {
        description:
          "The page: sessions resumed (queued), sessions refused (nothing to resume; they stay parked), and `nextCursor` (null when the pass is over)",
        schema: z.object({
          resumed: z.array(z.object({ sessionId: id, runId: id, kind: z.string() })),
          refused: z.array(z.object({ sessionId: id, reason: z.string() })),
          nextCursor: z.string().nullable(),
          retryAfterSeconds: z
            .number()
            .int()
            .optional()
            .describe("A tenant limit stopped the page early: ask for `nextCursor` again after this long"),
        }),
      },
      ...common,
      ...missing,
      409: {
        description:
          "The batch was cancelled and the pass's first page found nothing parked (`reason: batch_cancelled`: its sessions are cancelled, and a new message re-opens one), or the Idempotency-Key was used with another body",
        schema: errorSchema,
      },
    },
  }),
  "DELETE /v1/sessions/:id": del({
    operationId: "deleteSession",
    summary:
      "Delete a session with its messages, runs and events, whatever its state: a queued run is dropped, a running one stopped (it stores nothing more and starts no tool)",
    idParam: "session id",
    responses: {
      200: {
        description: "Deleted: from now on the session answers 404",
        schema: z.object({ id, deleted: z.literal(true) }),
      },
      ...common,
      ...missing,
    },
  }),
  "DELETE /v1/batches/:id": del({
    operationId: "deleteBatch",
    summary:
      "Delete a batch and all its sessions (as DELETE /v1/sessions/:id each); it answers 404 at once, owes no webhook, and its sessions go in chunks",
    idParam: "batch id",
    responses: {
      200: {
        description:
          "Deleted: `complete` false when the sweeper deletes the sessions this request did not get to (the batch answers 404 already)",
        schema: z.object({
          id,
          deleted: z.literal(true),
          sessionsDeleted: z.number().int().describe("Sessions this request deleted"),
          complete: z.boolean(),
        }),
      },
      ...common,
      ...missing,
    },
  }),
  "PATCH /v1/sessions/:id": {
    operationId: "setSessionEvents",
    summary:
      "Change a session's settings after its creation: `sessionEvents` turns its event stream on or off",
    idParam: "session id",
    body: sessionPatchBody,
    responses: {
      200: {
        description: "Set (also when it was already so)",
        schema: z.object({ id, sessionEvents: z.boolean() }),
      },
      ...common,
      ...missing,
      413: { description: "The body is larger than 16 MiB", schema: errorSchema },
      415: {
        description:
          "The body is not sent as `application/json`, declares a charset other than UTF-8, or is compressed (`Content-Encoding`)",
        schema: errorSchema,
      },
    },
  },
  "POST /v1/sessions/:id/cancel": post({
    operationId: "cancelSession",
    summary: "Cancel a session: queued runs dropped, a running one aborted; never resumed automatically",
    idParam: "session id",
    responses: {
      202: {
        description: "Cancelled (or already ended: `cancelled` false)",
        schema: z.object({ id, status: z.enum(SESSION_STATUSES), cancelled: z.boolean() }),
      },
      ...common,
      ...missing,
      ...conflict,
    },
  }),
  "GET /v1/sessions": {
    operationId: "listSessions",
    summary: "The caller's sessions, newest activity first",
    querystring: listQuery,
    responses: {
      200: {
        description: "Sessions; `nextCursor` (null on the last page) is the next page's `before`",
        schema: z.object({ sessions: z.array(sessionSummarySchema), nextCursor: z.string().nullable() }),
      },
      ...common,
    },
  },
  "GET /v1/sessions/:id": {
    operationId: "getSession",
    summary: "A session: history, runs, status (`limit`, `runsLimit`: a page of each)",
    idParam: "session id",
    querystring: z.strictObject({
      afterSeq: z
        .number()
        .int()
        .min(0)
        .optional()
        .describe("Only the messages after this seq (for a reader that has the earlier ones)"),
      limit: z
        .number()
        .int()
        .min(1)
        .max(MAX_SESSION_MESSAGES_PAGE)
        .optional()
        .describe(
          "At most this many messages (after `afterSeq`), and no more than fit in about 4 MiB (at least one); the answer's `nextAfterSeq` is the next page's `afterSeq`. Absent: every message",
        ),
      runsLimit: z
        .number()
        .int()
        .min(0)
        .max(MAX_SESSION_RUNS_PAGE)
        .optional()
        .describe(
          "Only the latest this many runs (still oldest first; 0: none), with `nextRunsBefore` for older ones. Absent: every run",
        ),
      runsBefore: z
        .string()
        .optional()
        .describe(
          `The \`nextRunsBefore\` of the previous answer: the runs before it (${DEFAULT_SESSION_RUNS_PAGE} unless \`runsLimit\` says)`,
        ),
    }),
    responses: { 200: { description: "The session", schema: sessionSchema }, ...common, ...missing },
  },
  "POST /v1/sessions/:id/messages": post({
    operationId: "send",
    summary: "Send a user message: queues a run",
    idParam: "session id",
    body: sendBody,
    responses: {
      202: { description: "Queued", schema: z.object({ runId: id }) },
      409: { description: "The history cannot take new input", schema: errorSchema },
      ...common,
      429: {
        ...common[429],
        description: `${common[429].description}; \`limit: "queued_runs"\`: this session already has FLEET_SESSION_MAX_QUEUED_RUNS runs waiting to start`,
      },
      ...missing,
    },
  }),
  "POST /v1/sessions/:id/history": post({
    operationId: "importMessages",
    summary:
      "Continue an imported history with a page (a session with no run yet): what one POST /v1/sessions cannot hold",
    idParam: "session id",
    body: importPageBody,
    responses: {
      200: {
        description: "Stored; `lastSeq` is where the next page goes",
        schema: z.object({ lastSeq: z.number() }),
      },
      409: {
        description:
          "`seq_mismatch`: the session does not end at `afterSeq` (a page stored already: read `lastSeq` and go on); `runs_exist`: a message or resume was sent, the import is over",
        schema: errorSchema,
      },
      ...common,
      ...missing,
    },
  }),
  "POST /v1/sessions/:id/resume": post({
    operationId: "resume",
    summary: "Resume an interrupted session (optionally with another model)",
    idParam: "session id",
    body: resumeBody,
    optionalBody: true,
    responses: {
      202: { description: "Queued", schema: z.object({ runId: id, kind: z.string() }) },
      409: { description: "Nothing to resume; `reason` says why", schema: errorSchema },
      ...common,
      ...missing,
    },
  }),
  "GET /v1/sessions/:id/resume-point": {
    operationId: "resumePoint",
    summary: "What a resume would do now",
    idParam: "session id",
    responses: { 200: { description: "The resume point", schema: resumePointSchema }, ...common, ...missing },
  },
  "GET /v1/runs/:id": {
    operationId: "getRun",
    summary: "A run",
    idParam: "run id",
    responses: {
      200: { description: "The run", schema: runSchema.extend({ sessionId: id }) },
      ...common,
      ...missing,
    },
  },
  "GET /v1/webhook-secret": {
    operationId: "webhookSecret",
    summary:
      "The secret that signs this tenant's batch webhooks, when the operator turned on per-tenant secrets (FLEET_WEBHOOK_SECRET_PER_TENANT); each key reads its own tenant's only",
    responses: {
      200: {
        description: "This tenant's webhook signing secret (`Cache-Control: no-store`)",
        schema: z.object({ secret: z.string() }),
      },
      ...common,
      404: {
        description:
          "Per-tenant webhook secrets are off: the fleet's FLEET_WEBHOOK_SECRET signs every webhook",
        schema: errorSchema,
      },
    },
  },
  "POST /v1/webhook-secret/rotate": post({
    operationId: "rotateWebhookSecret",
    summary:
      "Rotates this tenant's own webhook signing secret (FLEET_WEBHOOK_SECRET_PER_TENANT): deliveries are signed with the new secret and, until previousValidUntil (FLEET_WEBHOOK_SECRET_GRACE_MS), with the one before too; read the new one with GET /v1/webhook-secret. With an Idempotency-Key, a retry rotates nothing",
    responses: {
      200: {
        description: "The new generation, and until when the secret it replaced still signs deliveries",
        schema: z.object({ generation: z.number().int(), previousValidUntil: z.string() }),
      },
      ...common,
      404: {
        description:
          "Per-tenant webhook secrets are off: the fleet's FLEET_WEBHOOK_SECRET signs every webhook, rotated by the operator",
        schema: errorSchema,
      },
    },
  }),
  "GET /v1/openapi.json": {
    operationId: "openapi",
    summary: "This document",
    responses: {
      200: { description: "OpenAPI 3.1" },
      401: common[401],
      403: common[403],
      408: common[408],
      429: common[429],
      500: common[500],
      503: common[503],
    },
  },
};
