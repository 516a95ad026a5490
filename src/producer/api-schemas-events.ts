/**
 * The `/v1` schemas of the event streams (api-schemas.ts, contracts §7): a session's and a
 * batch's events, where a reader starts (`?after=`, Last-Event-ID), and the 410 for a place
 * gone.
 */
import { z } from "zod";
import { EVENT_TYPES } from "../shared/events.js";
import { messageSchema } from "../shared/messages.js";
import { countsSchema } from "./api-schemas-batches.js";
import { errorSchema, id } from "./api-schemas-common.js";

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
    type: z.enum(EVENT_TYPES),
    runId: z
      .string()
      .nullable()
      .optional()
      .describe(
        "Every run event; null on MESSAGE of an imported message; on SESSION_PARKED, the run whose end parked the session (absent: none did, or an earlier release wrote it)",
      ),
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
      "Without an id: start at the RUN_STARTED of this run of the session (at the end while it is queued; at its RUN_COMPLETED when it ended without starting, a cancel having dropped it) instead of the latest run's",
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
    description:
      'The id is older than the events kept, or past the newest event (one this stream never sent: from a stream since lost) (`reason: "expired"`): reconnect without one',
    schema: errorSchema,
  },
};
