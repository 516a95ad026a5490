/**
 * The `/v1` schemas of sessions (api-schemas.ts): a session, its runs, its summary in a
 * list and its resume point; what creating one, importing a history, sending, resuming and
 * changing its settings take; the list's query. The parts a batch's sessions share with
 * them (metadata, an imported history, `sessionEvents`, the park reasons) are here too.
 */
import { z } from "zod";
import { agentConfigSchema, modelConfigSchema } from "../shared/agent-config.js";
import { spentSchema } from "../shared/imported-spent.js";
import { messageSchema, toolCallSchema, usageSchema } from "../shared/messages.js";
import { PARK_REASONS } from "../shared/resume-policy.js";
import { id, usageTotalsSchema, when } from "./api-schemas-common.js";
import { SESSION_STATUSES } from "./fleet-service.js";
import { MAX_IMPORTED_MESSAGES, MAX_METADATA_BYTES, MAX_REQUEST_MESSAGES } from "./request-limits.js";

export const runSchema = z
  .object({
    id,
    kind: z.enum(["run", "resume"]),
    resumeKind: z.string().nullable(),
    trigger: z.string(),
    status: z.enum(["queued", "running", "ended"]),
    endedReason: z.string().nullable(),
    error: z.string().nullable(),
    workerId: z
      .string()
      .nullable()
      .describe(
        "The worker that took the run, as `worker-<8 hex>` (the end of the worker's id in the operator's logs; never its host name); null before a worker took it",
      ),
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
    spent: z
      .object({ modelCalls: z.number().int(), tokens: z.number().int() })
      .optional()
      .describe(
        "What `agent.budget` has counted for it across all its runs: model calls (counted as made for an agent with `budget.maxModelCalls`, and one per imported step) and tokens (reported, billed by failed attempts, estimated for steps of unknown usage)",
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

export const metadata = z
  .record(z.string(), z.unknown())
  .optional()
  .describe(`The caller's labels: a JSON object of at most ${MAX_METADATA_BYTES / 1024} KiB`);
export const imported = z
  .array(messageSchema)
  .max(MAX_IMPORTED_MESSAGES)
  .optional()
  .describe(
    `A history to import (at most ${MAX_IMPORTED_MESSAGES.toLocaleString("en")} messages; ${MAX_REQUEST_MESSAGES.toLocaleString("en")} in one request)`,
  );

export const sessionEvents = z
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
  spentOutsideHistory: spentSchema
    .optional()
    .describe(
      "What the imported session already spent of `agent.budget` beyond its history's steps (model calls that stored no step, tokens no step reports), counted with them; each imported step counts one model call and its reported tokens in any case",
    ),
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
export const resumeBody = z.strictObject({ model: modelConfigSchema.optional() });
export const sessionPatchBody = z.strictObject({
  sessionEvents: z
    .boolean()
    .describe(
      "Whether the session's event stream is written from now on. true: the stored messages go into it at once, and its runs' events from its next run; false: the stream is dropped, and readers of it end",
    ),
});
export const PARK_REASON_LIST = PARK_REASONS.map((reason) => `\`${reason}\``).join(", ");
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
