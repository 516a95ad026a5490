/**
 * What each `/v1` route takes and answers, as zod schemas (route-docs.ts says which route uses
 * which): turned into the OpenAPI document (`/v1/openapi.json`, openapi.ts) and used by the
 * tests to check real answers against it.
 * Requests are still parsed by fleet-service.ts (its errors name the field); these schemas
 * describe them and are never looser than that parsing.
 * They are written by route family: api-schemas-common.ts (an id, the error answer, summed
 * usage), api-schemas-sessions.ts, api-schemas-batches.ts, api-schemas-events.ts.
 */
export {
  appendBatchBody,
  batchCreated,
  batchResultSchema,
  batchResumeBody,
  batchSchema,
  createBatchBody,
} from "./api-schemas-batches.js";
export { errorSchema, id, usageTotalsSchema } from "./api-schemas-common.js";
export {
  batchEventSchema,
  eventsHeaders,
  eventsQuery,
  gone,
  sessionEventSchema,
  sessionEventsQuery,
} from "./api-schemas-events.js";
export {
  createSessionBody,
  goalSchema,
  importPageBody,
  listQuery,
  resumeBody,
  resumePointSchema,
  runSchema,
  sendBody,
  sessionPatchBody,
  sessionSchema,
  sessionSummarySchema,
} from "./api-schemas-sessions.js";
