/**
 * What one request may hold beyond the body's own checks (request-checks.ts), in one place for the
 * service that enforces them (request-bodies.ts, batch-entries.ts) and the OpenAPI document
 * (api-schemas.ts).
 */

/** What one session's metadata may hold, as JSON: the caller's labels, not its data. */
export const MAX_METADATA_BYTES = 64 * 1024;
/**
 * About how many bytes one page of `GET /v1/sessions` may hold: with 64 KiB of metadata a
 * session, `limit=1000` was a 64 MB answer built in memory. A page stops early at this size
 * (at least one session) and its `nextCursor` goes on.
 */
export const MAX_LIST_PAGE_BYTES = 4 * 1024 * 1024;
/**
 * About how many bytes of messages one page of `GET /v1/sessions/:id?limit=N` may hold: 1,000
 * messages of megabytes each were read and sent whole. A page stops early at this size (at
 * least one message) and its `nextAfterSeq` goes on.
 */
export const MAX_SESSION_PAGE_BYTES = 4 * 1024 * 1024;
/**
 * About how many bytes of outputs one page of `GET /v1/batches/:id/results` reads at once
 * (500 sessions a page; an output can be megabytes): a page stops early at this size.
 */
export const MAX_RESULTS_PAGE_BYTES = 8 * 1024 * 1024;
/** Messages one session may import. */
export const MAX_IMPORTED_MESSAGES = 10_000;
/** Messages one request may import in all (a batch's sessions together). */
export const MAX_REQUEST_MESSAGES = 50_000;
/** The largest request body, in bytes: imported histories can be long. */
export { BODY_LIMIT } from "../shared/body-limit.js";
/** About how many bytes a session's history may hold (shared/store/history-bytes.ts). */
export { MAX_HISTORY_BYTES } from "../shared/store/history-bytes.js";
/**
 * How long a request may take to arrive, headers and body (FLEET_API_REQUEST_TIMEOUT_MS's
 * default). Fastify turns Node's own bound (300 s) off, so a caller that sent its headers and
 * then a byte of its body every few seconds held its connection for ever — also one without a
 * key, whose 401 was sent while Node went on reading the body it had announced.
 */
export const REQUEST_TIMEOUT_MS = 120_000;
/** How long the headers alone may take (Node's default), unless the whole request has less. */
export const HEADERS_TIMEOUT_MS = 60_000;
