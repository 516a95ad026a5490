/**
 * What each `/v1` route takes and answers, as zod schemas: turned into the OpenAPI document
 * (`/v1/openapi.json`, openapi.ts) and used by the tests to check real answers against it.
 * Requests are still parsed by fleet-service.ts (its errors name the field); these schemas
 * describe them and are never looser than that parsing.
 */
import { z } from "zod";
import { agentConfigSchema, modelConfigSchema } from "../shared/agent-config.js";
import { messageSchema, toolCallSchema, usageSchema } from "../shared/messages.js";
import {
  DEFAULT_SESSION_RUNS_PAGE,
  MAX_SESSION_MESSAGES_PAGE,
  MAX_SESSION_RUNS_PAGE,
  SESSION_STATUSES,
} from "./fleet-service.js";
import { MAX_IMPORTED_MESSAGES, MAX_METADATA_BYTES, MAX_REQUEST_MESSAGES } from "./request-limits.js";

const id = z.string().min(1);
const when = z.string().describe("ISO 8601 time");

export const errorSchema = z
  .object({
    error: z.object({
      code: z.string(),
      message: z.string(),
      field: z.string().optional().describe("Where the problem is, e.g. `messages[2].content` (400)"),
      reason: z
        .string()
        .optional()
        .describe("Why there is nothing to resume, or `idempotency_key_reused`, `batch_closed` (409)"),
      limit: z
        .enum(["active_sessions", "request_rate", "event_streams"])
        .optional()
        .describe("Which tenant limit (429)"),
      retryAfter: z.number().int().optional().describe("Seconds to wait, as in Retry-After (429)"),
    }),
  })
  .meta({ id: "Error" });

export const runSchema = z
  .object({
    id,
    kind: z.enum(["run", "resume"]),
    resumeKind: z.string().nullable(),
    trigger: z.string(),
    status: z.enum(["queued", "running", "ended"]),
    endedReason: z.string().nullable(),
    error: z.string().nullable(),
    workerId: z.string().nullable(),
    usage: usageSchema
      .nullable()
      .or(z.unknown())
      .describe(
        "The run's steps' reported usage summed, as the worker that ended it recorded it (null for a run it did not end); `unknownSteps`: its steps with no usage reported, which the sums miss",
      ),
    createdAt: when,
    startedAt: when.nullable(),
    endedAt: when.nullable(),
  })
  .meta({ id: "Run" });

const storedMessage = messageSchema;

/** Summed usage of a session's (or a set of sessions') model steps (prices.ts `UsageTotals`). */
export const usageTotalsSchema = z
  .object({
    inputTokens: z.number(),
    outputTokens: z.number(),
    cacheReadTokens: z.number(),
    cacheWriteTokens: z.number(),
    reasoningTokens: z.number(),
    costUsd: z.number(),
    unknownSteps: z
      .number()
      .int()
      .describe(
        "Model steps whose provider reported no usage: the sums count nothing for them (0 tokens with unknownSteps > 0 is not known, not free)",
      ),
  })
  .meta({ id: "UsageTotals" });

export const sessionSchema = z
  .object({
    id,
    status: z.enum(SESSION_STATUSES),
    tailState: z.string(),
    parkedReason: z.string().nullable(),
    agent: z.unknown(),
    metadata: z.record(z.string(), z.unknown()),
    messages: z.array(storedMessage),
    runs: z.array(runSchema),
    usage: usageTotalsSchema.describe(
      "The model steps' stored usage summed; `costUsd` by FLEET_PRICES (steps of unpriced models count 0)",
    ),
    createdAt: when,
    updatedAt: when,
    sessionEvents: z
      .literal(false)
      .optional()
      .describe("Present when the session was created with `sessionEvents: false` (it has no event stream)"),
    nextAfterSeq: z
      .number()
      .int()
      .nullable()
      .optional()
      .describe("With `limit`: the `afterSeq` of the next page of messages; null when none follows"),
    nextRunsBefore: z
      .string()
      .nullable()
      .optional()
      .describe(
        "With `runsLimit` or `runsBefore`: the `runsBefore` of the older runs; null when none is older",
      ),
  })
  .meta({ id: "Session" });

export const sessionSummarySchema = z
  .object({
    id,
    batchId: z.string().nullable(),
    customId: z.string().nullable(),
    parked: z.boolean(),
    tailState: z.string(),
    parkedReason: z.string().nullable(),
    metadata: z.record(z.string(), z.unknown()),
    updatedAt: when,
  })
  .meta({ id: "SessionSummary" });

export const resumePointSchema = z
  .union([
    z.object({
      resumable: z.literal(true),
      kind: z.string(),
      description: z.string(),
      unansweredToolCalls: z.array(toolCallSchema),
    }),
    z.object({ resumable: z.literal(false), reason: z.string(), detail: z.string().optional() }),
  ])
  .meta({ id: "ResumePoint" });

const metadata = z
  .record(z.string(), z.unknown())
  .optional()
  .describe(`The caller's labels: a JSON object of at most ${MAX_METADATA_BYTES / 1024} KiB`);
const imported = z
  .array(messageSchema)
  .max(MAX_IMPORTED_MESSAGES)
  .optional()
  .describe(
    `A history to import (at most ${MAX_IMPORTED_MESSAGES.toLocaleString("en")} messages; ${MAX_REQUEST_MESSAGES.toLocaleString("en")} in one request)`,
  );

const sessionEvents = z
  .boolean()
  .optional()
  .describe(
    "false: no event stream is written for it (saves Redis memory and worker time); GET …/events answers 409 `session_events_off`. Default true",
  );
export const createSessionBody = z.strictObject({
  agent: agentConfigSchema,
  metadata,
  messages: imported,
  sessionEvents,
});
const batchItem = z.strictObject({
  agent: agentConfigSchema,
  metadata,
  messages: imported,
  input: z.string().min(1).max(1_000_000).optional().describe("The first user message: queues a run"),
  customId: z.string().min(1).max(256).optional().describe("The caller's id, unique within the batch"),
  sessionEvents: z
    .boolean()
    .optional()
    .describe(
      "false: this session has no event stream, whatever the batch's setting. Default: the batch's setting; true in a batch created with `sessionEvents: false` is refused (400)",
    ),
});
export const createBatchBody = z.strictObject({
  sessions: z.array(batchItem).min(1).max(1_000),
  webhook: z
    .strictObject({ url: z.string() })
    .optional()
    .describe("POSTed the batch JSON, signed (Fleet-Signature), once the batch has ended"),
  open: z
    .boolean()
    .optional()
    .describe("Takes more sessions (POST /v1/batches/:id/sessions) and does not end until closed"),
  sessionEvents: sessionEvents.describe(
    "false: no session of the batch (also those appended later) has an event stream; the batch's own stream (GET /v1/batches/:id/events) is written as always. Default true",
  ),
});
export const appendBatchBody = z.strictObject({
  sessions: z.array(batchItem).max(1_000),
  close: z.boolean().optional().describe("The last part: the batch takes no more sessions"),
});
const batchCreated = z.object({
  id,
  sessions: z.array(z.object({ id, runId: id.nullable(), customId: z.string().nullable() })),
  webhook: z.object({ url: z.string() }).optional(),
});
const countsSchema = z.object({
  total: z.number().int(),
  queued: z.number().int(),
  running: z.number().int(),
  completed: z.number().int(),
  parked: z.number().int(),
  cancelled: z.number().int(),
});
export const batchSchema = z
  .object({
    id,
    status: z.enum(["running", "ended", "cancelled"]),
    counts: countsSchema,
    createdAt: when,
    endedAt: when.optional(),
    cancelledAt: when.optional(),
    open: z.boolean(),
    sessionEvents: z
      .literal(false)
      .optional()
      .describe("Present when the batch was created with `sessionEvents: false`"),
    webhook: z.object({ url: z.string(), deliveredAt: when.nullable() }).optional(),
  })
  .meta({ id: "Batch" });
export const batchResultSchema = z
  .object({
    customId: z.string().nullable(),
    sessionId: id,
    status: z.enum(["queued", "running", "completed", "parked", "cancelled"]),
    parkedReason: z.string().optional(),
    output: z.string().nullable(),
    usage: usageTotalsSchema,
    endedAt: when.nullable(),
  })
  .meta({ id: "BatchResult" });
export const goalSchema = z
  .strictObject({
    text: z.string().min(1).max(100_000),
    maxRounds: z.number().int().min(1).max(100),
  })
  .describe(
    "Goal mode for this run only: when the model ends its turn, an internal message restates the goal and asks it to keep working or answer GOAL_MET, at most maxRounds times",
  );
export const sendBody = z.strictObject({
  content: z.string().min(1).max(1_000_000),
  goal: goalSchema.optional(),
});

/** One event of a session's stream (contracts §7), the `data:` line of an SSE event. */
export const sessionEventSchema = z
  .object({
    sessionId: id,
    type: z.enum([
      "RUN_STARTED",
      "MESSAGE_DELTA",
      "MESSAGE",
      "TOOL_STARTED",
      "TOOL_FINISHED",
      "MODEL_STOPPED",
      "RUN_COMPLETED",
      "SESSION_PARKED",
    ]),
    runId: z
      .string()
      .nullable()
      .optional()
      .describe("Every run event; null on MESSAGE of an imported message"),
    kind: z.enum(["run", "resume"]).optional().describe("RUN_STARTED"),
    resumeKind: z.string().nullable().optional().describe("RUN_STARTED"),
    trigger: z.string().optional().describe("RUN_STARTED"),
    text: z.string().optional().describe("MESSAGE_DELTA (best effort: not replayed after a crash)"),
    message: messageSchema.optional().describe("MESSAGE: the committed message, with seq and createdAt"),
    toolCallId: z.string().optional().describe("TOOL_STARTED, TOOL_FINISHED"),
    name: z.string().optional().describe("TOOL_STARTED, TOOL_FINISHED"),
    success: z.boolean().optional().describe("TOOL_FINISHED"),
    stopReason: z.string().optional().describe("MODEL_STOPPED"),
    outcome: z.string().optional().describe("RUN_COMPLETED: the run's endedReason"),
    reason: z.string().optional().describe("SESSION_PARKED"),
  })
  .meta({ id: "SessionEvent" });
/** One event of a batch's stream (contracts §7). */
export const batchEventSchema = z
  .object({
    type: z.enum(["SESSION_ENDED", "BATCH_COMPLETED"]),
    batchId: id,
    sessionId: id.optional().describe("SESSION_ENDED"),
    customId: z.string().nullable().optional().describe("SESSION_ENDED"),
    status: z
      .string()
      .describe("SESSION_ENDED: completed, parked or cancelled; BATCH_COMPLETED: ended or cancelled"),
    parkedReason: z.string().optional(),
    counts: countsSchema.optional().describe("BATCH_COMPLETED"),
  })
  .meta({ id: "BatchEvent" });
const eventsQuery = z.strictObject({
  after: z
    .string()
    .optional()
    .describe("Resume after this event id (as the `Last-Event-ID` header, which wins when both are sent)"),
});
const sessionEventsQuery = eventsQuery.extend({
  run: z
    .string()
    .optional()
    .describe(
      "Without an id: start at the RUN_STARTED of this run of the session (at the end while it is queued) instead of the latest run's",
    ),
});
const eventsHeaders = z.object({
  "Last-Event-ID": z
    .string()
    .optional()
    .describe("Resume after this event id (the `id:` of the last event received); wins over `?after=`"),
});
const gone = {
  410: {
    description: 'The id is older than the events kept (`reason: "expired"`): reconnect without one',
    schema: errorSchema,
  },
};
export const resumeBody = z.strictObject({ model: modelConfigSchema.optional() });
export const sessionPatchBody = z.strictObject({
  sessionEvents: z
    .boolean()
    .describe(
      "Whether the session's event stream is written from now on. true: the stored messages go into it at once, and its runs' events from its next run; false: the stream is dropped, and readers of it end",
    ),
});
const batchResumeBody = z.strictObject({
  parkedReason: z
    .string()
    .optional()
    .describe("Only sessions parked for this reason (e.g. `provider_rejected`, `attempts_exhausted`)"),
  model: modelConfigSchema.optional().describe("Resume with this MODEL instead of the agent's"),
  cursor: z.string().optional().describe("The `nextCursor` of the previous page"),
  limit: z.number().int().min(1).max(1_000).optional().describe("Sessions per page (default 200)"),
});
export const listQuery = z.strictObject({
  status: z
    .enum(["parked", "active", "cancelled", "queued", "running", "completed"])
    .optional()
    .describe("By current state, as batch counts count"),
  batch: z.string().optional().describe("Only the sessions of this batch"),
  parkedReason: z
    .string()
    .optional()
    .describe("Only sessions parked for this reason (e.g. `attempts_exhausted`)"),
  before: z
    .string()
    .optional()
    .describe("The `nextCursor` of the previous page: the sessions after it in the list's order"),
  limit: z.number().int().min(1).max(1_000).optional().describe("Page size (default 100)"),
});

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
  429: {
    description: "Over a tenant limit; see Retry-After",
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
      415: { description: "The body is not sent as `application/json`", schema: errorSchema },
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
      415: { description: "The body is not sent as `application/json`", schema: errorSchema },
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
          "At most this many messages (after `afterSeq`); the answer's `nextAfterSeq` is the next page's `afterSeq`. Absent: every message",
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
      ...missing,
    },
  }),
  "POST /v1/sessions/:id/resume": post({
    operationId: "resume",
    summary: "Resume an interrupted session (optionally with another model)",
    idParam: "session id",
    body: resumeBody,
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
  "GET /v1/openapi.json": {
    operationId: "openapi",
    summary: "This document",
    responses: {
      200: { description: "OpenAPI 3.1" },
      401: common[401],
      403: common[403],
      429: common[429],
      500: common[500],
      503: common[503],
    },
  },
};
