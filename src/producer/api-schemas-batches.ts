/**
 * The `/v1` schemas of batches (api-schemas.ts): what creating one, adding to it and
 * resuming its parked sessions take; a batch, its counts and its result lines.
 */
import { z } from "zod";
import { agentConfigSchema, modelConfigSchema } from "../shared/agent-config.js";
import { id, usageTotalsSchema, when } from "./api-schemas-common.js";
import { imported, metadata, PARK_REASON_LIST, sessionEvents } from "./api-schemas-sessions.js";

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
export const countsSchema = z.object({
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
    output: z
      .string()
      .nullable()
      .describe("The last assistant text of a completed session; null for every other status"),
    usage: usageTotalsSchema,
    endedAt: when.nullable(),
  })
  .meta({ id: "BatchResult" });
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
