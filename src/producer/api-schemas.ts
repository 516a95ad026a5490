/**
 * What each `/v1` route takes and answers, as zod schemas (route-docs.ts says which route uses
 * which): turned into the OpenAPI document (`/v1/openapi.json`, openapi.ts) and used by the
 * tests to check real answers against it.
 * Requests are still parsed by fleet-service.ts (its errors name the field); these schemas
 * describe them and are never looser than that parsing.
 */
import { z } from "zod";
import { agentConfigSchema, modelConfigSchema } from "../shared/agent-config.js";
import { TENANT_LIMITS } from "../shared/errors.js";
import { messageSchema, toolCallSchema, usageSchema } from "../shared/messages.js";
import { PARK_REASONS } from "../shared/resume-policy.js";
import { SESSION_STATUSES } from "./fleet-service.js";
import { MAX_IMPORTED_MESSAGES, MAX_METADATA_BYTES, MAX_REQUEST_MESSAGES } from "./request-limits.js";

export const id = z.string().min(1);
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
        .describe(
          "Why there is nothing to resume, or `idempotency_key_reused`, `batch_closed`, `batch_cancelled` (409)",
        ),
      limit: z
        .enum(TENANT_LIMITS)
        .optional()
        .describe(
          "Which limit (429): a tenant's, the client address's (`auth_failures`), the session's (`queued_runs`) or the API process's (`big_bodies`)",
        ),
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
    model: z
      .unknown()
      .describe(
        "The MODEL this run was asked to use in the agent's model's place (a resume's `model`, a fallback the sweeper chose, or one an automatic resume kept); null when it runs on the agent's own model",
      ),
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
    status: z.enum(SESSION_STATUSES).describe("What it is doing, as `GET /v1/sessions/:id` says"),
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
/** POST /v1/sessions/:id/history: the next page of an imported history (imported-pages.ts). */
export const importPageBody = z.strictObject({
  afterSeq: z
    .number()
    .int()
    .nonnegative()
    .describe(
      "The session's `lastSeq` now: the page is stored right after it, or refused with 409 `seq_mismatch`",
    ),
  messages: z
    .array(messageSchema)
    .min(1)
    .max(MAX_IMPORTED_MESSAGES)
    .describe(`The page (at most ${MAX_IMPORTED_MESSAGES.toLocaleString("en")} messages)`),
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
export const batchCreated = z.object({
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
    webhook: z
      .object({
        url: z.string(),
        deliveredAt: when.nullable(),
        failedAt: when.optional().describe("When its delivery was given up (its attempts spent); only then"),
        lastError: z
          .string()
          .optional()
          .describe(
            "Why the last delivery attempt failed, or why the delivery was given up (one line, at most 300 characters, never the receiver's answer body); absent until an attempt fails",
          ),
      })
      .optional(),
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

/** Every event's time (an addition to §7). */
const eventAt = z
  .string()
  .optional()
  .describe(
    "When the event entered the stream (ISO 8601, Redis's clock); a MESSAGE's message.createdAt is its commit time",
  );
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
    endedAt: z
      .string()
      .optional()
      .describe(
        "RUN_COMPLETED written late by a repair (a lost run end): when the run ended; its `at` is the repair's",
      ),
    reason: z.string().optional().describe("SESSION_PARKED"),
    at: eventAt,
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
    at: eventAt,
  })
  .meta({ id: "BatchEvent" });
export const eventsQuery = z.strictObject({
  after: z
    .string()
    .optional()
    .describe("Resume after this event id (as the `Last-Event-ID` header, which wins when both are sent)"),
});
export const sessionEventsQuery = eventsQuery.extend({
  run: z
    .string()
    .optional()
    .describe(
      "Without an id: start at the RUN_STARTED of this run of the session (at the end while it is queued) instead of the latest run's",
    ),
});
export const eventsHeaders = z.object({
  "Last-Event-ID": z
    .string()
    .optional()
    .describe("Resume after this event id (the `id:` of the last event received); wins over `?after=`"),
});
export const gone = {
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
const PARK_REASON_LIST = PARK_REASONS.map((reason) => `\`${reason}\``).join(", ");
export const batchResumeBody = z.strictObject({
  parkedReason: z
    .string()
    .optional()
    .describe(
      `Only sessions parked for this reason: one of ${PARK_REASON_LIST}, alone or followed by ": " and its detail as the session shows it (another value is a 400)`,
    ),
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
    .describe(
      `Only sessions parked for this reason: one of ${PARK_REASON_LIST}, alone or followed by ": " and its detail as the session shows it (another value is a 400)`,
    ),
  before: z
    .string()
    .optional()
    .describe("The `nextCursor` of the previous page: the sessions after it in the list's order"),
  limit: z.number().int().min(1).max(1_000).optional().describe("Page size (default 100)"),
});
