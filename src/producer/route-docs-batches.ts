/**
 * The documented routes of batches (route-docs.ts): creating one and adding to it, reading
 * it and its result lines, cancelling it, resuming its parked sessions, deleting it.
 */
import { z } from "zod";
import {
  appendBatchBody,
  batchCreated,
  batchResultSchema,
  batchResumeBody,
  batchSchema,
  createBatchBody,
  errorSchema,
  id,
  usageTotalsSchema,
} from "./api-schemas.js";
import { common, conflict, del, missing, noFields, post, type RouteDoc } from "./route-docs-common.js";

/** The batch routes, by `METHOD path` (route-docs.ts puts them in ROUTE_DOCS). */
export const BATCH_ROUTE_DOCS = {
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
        .regex(/^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/)
        .optional()
        .describe(
          "A session id (a line's `sessionId`; anything else, a customId too, is a 400): only the lines after that session's (a read that broke goes on)",
        ),
    }),
    responses: {
      200: {
        description: "Lines of BatchResult, in session-id order",
        schema: batchResultSchema,
        media: "application/x-ndjson",
      },
      ...common,
      429: {
        ...common[429],
        description: `${common[429].description}; \`limit: "results_reads"\`: this tenant already has FLEET_RESULTS_MAX_READS_PER_TENANT results reads open, across the fleet's API processes`,
      },
      ...missing,
    },
  },
  "POST /v1/batches/:id/cancel": post({
    operationId: "cancelBatch",
    summary: "Cancel every session of the batch that has not ended",
    idParam: "batch id",
    ...noFields,
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
} satisfies Record<string, RouteDoc>;
