/**
 * What one request may hold beyond the body's own checks (request-checks.ts), in one place for the
 * service that enforces them (request-bodies.ts, batch-entries.ts) and the OpenAPI document
 * (api-schemas.ts).
 */

/** What one session's metadata may hold, as JSON: the caller's labels, not its data. */
export const MAX_METADATA_BYTES = 64 * 1024;
/** Messages one session may import. */
export const MAX_IMPORTED_MESSAGES = 10_000;
/** Messages one request may import in all (a batch's sessions together). */
export const MAX_REQUEST_MESSAGES = 50_000;
/** The largest request body, in bytes: imported histories can be long. */
export const BODY_LIMIT = 16 * 1024 * 1024;
