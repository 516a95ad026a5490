/**
 * What every documented `/v1` route shares (route-docs.ts): the types of a route's
 * documentation, the answers any route may give, and what `POST` and `DELETE` routes add
 * (Idempotency-Key, body limits).
 */
import { z } from "zod";
import { errorSchema } from "./api-schemas.js";
import { NO_FIELDS } from "./request-bodies.js";

/** One answer of a route: its body (as `media`, JSON unless said) and the headers it sets. */
export type ResponseDoc = {
  description: string;
  schema?: z.ZodType;
  /** The body's media type when it is not `application/json`. */
  media?: string;
  headers?: Record<string, { description: string; type: "string" | "integer" }>;
};

/** One documented route: what it takes and its answers by status. */
export type RouteDoc = {
  /** The operation's name: the FleetClient method that calls it (client.ts), for generated clients too. */
  operationId: string;
  summary: string;
  body?: z.ZodType;
  /**
   * The body may be left out, or sent empty with `Content-Type: application/json` (the same):
   * the document says `requestBody.required: false` (openapi.ts), which @fastify/swagger
   * cannot say by itself.
   */
  optionalBody?: true;
  querystring?: z.ZodType;
  /** Request headers the route reads (Idempotency-Key, Last-Event-ID). */
  headers?: z.ZodType;
  idParam?: string;
  responses: Record<number, ResponseDoc>;
};

export const common = {
  400: { description: "Bad input; `field` names where", schema: errorSchema },
  401: { description: "No valid API key", schema: errorSchema },
  403: {
    description:
      "No API key exists yet (dev mode) and the request was not addressed to a loopback name (`Host`), or a web page of another origin sent it (`Origin`, `Sec-Fetch-Site`)",
    schema: errorSchema,
  },
  408: {
    description:
      "The request (headers and body) did not arrive whole within FLEET_API_REQUEST_TIMEOUT_MS; the connection is closed",
    schema: errorSchema,
  },
  429: {
    description:
      'Over a tenant limit (`limit` names it), or too many failed authentications from the client\'s address (`limit: "auth_failures"`); see Retry-After',
    schema: errorSchema,
    headers: {
      "Retry-After": { description: "Seconds to wait before sending the request again", type: "integer" },
    },
  },
  500: {
    description: "An unexpected failure (`internal`); the API's log has it, the answer no internals",
    schema: errorSchema,
  },
  503: {
    description:
      "Postgres or Redis is unreachable or refusing work (`unavailable`); try again after Retry-After",
    schema: errorSchema,
    headers: {
      "Retry-After": { description: "Seconds to wait before sending the request again", type: "integer" },
    },
  },
} satisfies Record<number, ResponseDoc>;

/**
 * A `POST` route: it takes an Idempotency-Key (contracts §9: 409 when reused with another
 * body), and its body is JSON of at most 16 MiB (Fastify answers 413 and 415 before the
 * route sees it).
 */
export function post(doc: RouteDoc): RouteDoc {
  return {
    ...doc,
    headers: z.object({
      "Idempotency-Key": z
        .string()
        .regex(/^[\x21-\x7e]{1,255}$/)
        .optional()
        .describe(
          "1 to 255 visible ASCII characters, kept per tenant for 24 h: a retry with the same key, path and body returns the first answer (`idempotent-replayed: true`) and acts once",
        ),
    }),
    responses: {
      409: { description: "The Idempotency-Key was used with another body (`reason`)", schema: errorSchema },
      ...doc.responses,
      413: { description: "The body is larger than 16 MiB", schema: errorSchema },
      415: {
        description:
          "The body is not sent as `application/json`, declares a charset other than UTF-8, or is compressed (`Content-Encoding`)",
        schema: errorSchema,
      },
    },
  };
}
/**
 * The body of a route that takes nothing but its path (cancels, deletes, a secret's rotation): none, or
 * `{}`; the route parses request-bodies.ts `noFieldsBody`, which refuses any field.
 */
export const noFields = { body: NO_FIELDS, optionalBody: true } as const;
/**
 * A `DELETE` route: it takes an Idempotency-Key too (a retry with the same key returns the
 * first answer, where a retry without one would get 404); its body is none or `{}` (`noFields`:
 * a field is a 400), so a body it does not read is refused as a POST's would be (413, 415).
 */
export function del(doc: RouteDoc): RouteDoc {
  const posted = post({ ...doc, ...noFields });
  return {
    ...posted,
    responses: {
      ...posted.responses,
      409: {
        description: "The Idempotency-Key was used with another request (`reason`)",
        schema: errorSchema,
      },
    },
  };
}
/** An id in the URL over 100 characters: no session, run or batch id is (route-docs.ts adds it). */
export const idTooLong: ResponseDoc = {
  description: "An id in the URL is longer than 100 characters (no id is)",
  schema: errorSchema,
};
/** Headers over Node's limit (16 KiB): answered before any route (route-docs.ts adds it). */
export const headersTooLarge: ResponseDoc = {
  description: "The request's headers are too large",
  schema: errorSchema,
};
/** Bytes that are not HTTP/1.1 (a NUL in a header, say): on a route that documents no 400 of its own. */
export const notHttp: ResponseDoc = {
  description: "The request is not valid HTTP/1.1",
  schema: errorSchema,
};
export const missing = { 404: { description: "No such id (or another tenant's)", schema: errorSchema } };
export const conflict = {
  409: { description: "The Idempotency-Key was used with another body (`reason`)", schema: errorSchema },
};
