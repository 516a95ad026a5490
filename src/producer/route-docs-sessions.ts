/**
 * The documented routes of sessions (route-docs.ts): creating, reading, listing, changing,
 * cancelling and deleting one; sending it a message, importing its history, resuming it;
 * its resume point, and a run.
 */
import { z } from "zod";
import { SESSION_STATUSES } from "../shared/api-types.js";
import {
  createSessionBody,
  errorSchema,
  id,
  importPageBody,
  listQuery,
  resumeBody,
  resumePointSchema,
  runSchema,
  sendBody,
  sessionPatchBody,
  sessionSchema,
  sessionSummarySchema,
} from "./api-schemas.js";
import {
  DEFAULT_SESSION_RUNS_PAGE,
  MAX_SESSION_MESSAGES_PAGE,
  MAX_SESSION_RUNS_PAGE,
} from "./request-bodies.js";
import { common, conflict, del, missing, noFields, post, type RouteDoc } from "./route-docs-common.js";

/** The session routes, by `METHOD path` (route-docs.ts puts them in ROUTE_DOCS). */
export const SESSION_ROUTE_DOCS = {
  "POST /v1/sessions": post({
    operationId: "createSession",
    summary: "Create a session (optionally importing a history)",
    body: createSessionBody,
    responses: { 201: { description: "Created", schema: z.object({ id }) }, ...common, ...conflict },
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
    ...noFields,
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
      409: {
        description:
          "The history cannot take new input: `malformed` (its tool calls and results do not pair up), or `history_full` (with the messages waiting to run, this one would bring it past the about 32 MiB a session's history may hold)",
        schema: errorSchema,
      },
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
      200: {
        description: "The run",
        schema: runSchema.extend({
          sessionId: id,
          sessionParkedReason: z
            .string()
            .optional()
            .describe(
              "Only for a queued run whose session is parked: its parkedReason. The run waits for someone to act (an explicit resume starts it; a new message runs it first)",
            ),
        }),
      },
      ...common,
      ...missing,
    },
  },
} satisfies Record<string, RouteDoc>;
