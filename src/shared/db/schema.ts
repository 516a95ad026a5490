/**
 * The Drizzle schema. Migrations are generated from it by drizzle-kit into `drizzle/`
 * (`npm run db:generate`), committed, and never edited by hand. The tables are defined by
 * area in the `*-tables.ts` files beside it (drizzle.config.ts reads those); this module
 * exports them all, with their row types.
 */
import type { apiKeys, batches } from "./fleet-tables.js";
import type { runs } from "./run-tables.js";
import type { messages, sessions } from "./session-tables.js";

export {
  apiKeys,
  batches,
  fleetIdentity,
  idempotencyKeys,
  webhookSecretGenerations,
} from "./fleet-tables.js";
export { runs, runsQueueSeq } from "./run-tables.js";
export {
  messages,
  RESUMABLE_TAIL_STATES,
  sessionDeletions,
  sessions,
  sessionUsageMarks,
} from "./session-tables.js";

export type BatchRow = typeof batches.$inferSelect;
export type SessionRow = typeof sessions.$inferSelect;
export type MessageRow = typeof messages.$inferSelect;
export type RunRow = typeof runs.$inferSelect;
export type ApiKeyRow = typeof apiKeys.$inferSelect;
