/**
 * What the API's request log lines say of a request (pino's `req`, Fastify's fields). Only
 * `Authorization: Bearer KEY` is read, but a client that cannot set headers (a browser's
 * EventSource) may send its key in the URL's query — refused, and before, written in clear
 * into the operator's log with the URL (test/api-key-in-query-log.test.ts). The query is
 * logged without values that are, or are named like, credentials.
 */
import type { FastifyRequest } from "fastify";
import { REDACTED, scrubSecrets } from "../shared/scrub-secrets.js";

/** A key of ours (`fk_<id>_<secret>`): its id is kept (`fleet keys list` shows it), not its secret. */
const FLEET_KEY = /\b(fk_[0-9a-f]{12}_)[A-Za-z0-9_-]+/g;
/** Query parameters named like a credential that scrubSecrets does not know by name. */
const KEY_PARAMETER = /([?&](?:key|apikey|auth|authorization|bearer|credentials?)=)[^&#]*/gi;

/** `url` as a log line may quote it (pure): its path as it came, its query without credentials. */
export function loggedUrl(url: string): string {
  const query = url.indexOf("?");
  if (query < 0) return url;
  const scrubbed = scrubSecrets(url.slice(query))
    .replace(FLEET_KEY, `$1${REDACTED}`)
    .replace(KEY_PARAMETER, `$1${REDACTED}`);
  return url.slice(0, query) + scrubbed;
}

/** The fields of Fastify's own `req` serializer, with the URL as `loggedUrl` says. */
export function requestLogFields(request: FastifyRequest): Record<string, unknown> {
  return {
    method: request.method,
    url: loggedUrl(request.url),
    version: request.headers?.["accept-version"],
    host: request.host,
    remoteAddress: request.ip,
    remotePort: request.socket?.remotePort,
  };
}
