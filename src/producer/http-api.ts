/**
 * The HTTP API of contracts.md §4 (Fastify): the server, who may call it, and the checks every
 * request passes before its route (api-routes.ts). 4xx answers say what is wrong and name the
 * field; 5xx answers hide internals (they are logged instead: error-answers.ts).
 */
import { STATUS_CODES } from "node:http";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { NotFoundError, TooManyRequestsError } from "../shared/errors.js";
import { nextTurn } from "../shared/event-loop-slices.js";
import { answerHalfClosedClients } from "../shared/http-server.js";
import { withAdminHeaders } from "./admin-headers.js";
import type { ApiDeps } from "./api-deps.js";
import { fastify } from "./api-packages.js";
import { routes } from "./api-routes.js";
import { UnauthorizedError } from "./auth.js";
import { BIG_BODY_BYTES, BigBodyGate } from "./big-bodies.js";
import { isConsoleRoute } from "./console-route.js";
import { answerError, errorBody, sendTooManyRequests, sendUnauthorized } from "./error-answers.js";
import { idempotencyHooks, originForm } from "./idempotency-hooks.js";
import { documentRoutes } from "./openapi.js";
import { NO_FIELDS } from "./request-bodies.js";
import {
  checkBody,
  checkQuery,
  checkRepeatedQuery,
  checkRouteQuery,
  decodeJsonBody,
  parseJsonBody,
  unfindableId,
} from "./request-checks.js";
import { BODY_LIMIT, HEADERS_TIMEOUT_MS, REQUEST_TIMEOUT_MS } from "./request-limits.js";
import { requestLogFields } from "./request-log.js";
import { ROUTE_DOCS } from "./route-docs.js";

export type { ApiDeps } from "./api-deps.js";
export { MAX_JSON_DEPTH } from "./request-checks.js";

declare module "fastify" {
  interface FastifyRequest {
    /** The caller's tenant (auth.ts), set before the body is read on every route but the open ones. */
    tenant: string;
    /** The Idempotency-Key this request holds (its answer is stored when it is sent). */
    idempotencyKey: string;
  }
}

/** Routes served without a key: Prometheus and health checks. */
const OPEN_ROUTES = new Set(["/metrics", "/healthz"]);
/** Where admin routes live: they need an admin key (auth.ts `authenticateAdmin`). */
export const ADMIN_PREFIX = "/admin";

/** Whether a request goes to an admin route, by the route it matched or by its path. */
function isAdminRequest(routeUrl: string | undefined, url: string): boolean {
  const under = (path: string) => path === ADMIN_PREFIX || path.startsWith(`${ADMIN_PREFIX}/`);
  return under(routeUrl ?? "") || under(url.split("?")[0]!.toLowerCase());
}

/**
 * Who a request is from: its tenant (undefined for an admin route, admitted). Each 401 of a
 * request that sent credentials counts against its client address (auth-failures.ts); past
 * the limit, a request with credentials gets TooManyRequestsError before any key look-up,
 * unless its key was valid lately; a look-up in flight counts until it is answered
 * (auth-failures.ts `begin`). Requests without credentials cost no look-up: they get their
 * 401 (or dev mode) as always.
 */
async function authenticated(
  deps: ApiDeps,
  request: FastifyRequest,
  admin: boolean,
): Promise<string | undefined> {
  const { authorization } = request.headers;
  const failures = authorization ? deps.authFailures : undefined;
  const wait = failures?.retryAfter(request.ip) ?? 0;
  if (failures && wait > 0 && !deps.auth.recognises?.(authorization)) {
    const { perMinute, burst } = failures.limit;
    throw new TooManyRequestsError(
      "auth_failures",
      wait,
      `too many failed authentications from this address (${perMinute} a minute, bursts of ${burst}: FLEET_API_AUTH_FAILURES_PER_MINUTE); try again in ${wait} s with a valid API key`,
    );
  }
  // Held until the look-up is answered: requests sent at once cannot all pass the check above.
  const done = failures && authorization ? failures.begin(request.ip, authorization) : undefined;
  try {
    if (!admin) return await deps.auth.authenticate(authorization, request.headers);
    await deps.auth.authenticateAdmin(authorization, request.headers);
    return undefined;
  } catch (error) {
    if (error instanceof UnauthorizedError && error.status === 401 && authorization) {
      done?.();
      failures?.failed(request.ip);
      deps.metrics?.authFailures.inc();
    }
    throw error;
  } finally {
    done?.();
  }
}

/** Read as the type it says; kept by no cache unless the route said otherwise (its own Cache-Control). */
function withAnswerHeaders(reply: FastifyReply): FastifyReply {
  reply.header("x-content-type-options", "nosniff");
  if (!reply.hasHeader("cache-control")) reply.header("cache-control", "no-store");
  return reply;
}

/** Counts a 429 by its limit (`fleet_requests_limited_total`), whoever answers it. */
function countLimited(deps: ApiDeps, error: unknown): void {
  if (error instanceof TooManyRequestsError) deps.metrics?.requestsLimited.inc({ limit: error.limit });
}

export function buildApi(deps: ApiDeps): FastifyInstance {
  const requestTimeout = deps.requestTimeoutMs ?? REQUEST_TIMEOUT_MS;
  const app = fastify({
    logger: { level: deps.logLevel ?? "info", base: { role: "api" }, serializers: { req: requestLogFields } },
    bodyLimit: BODY_LIMIT,
    // Whose X-Forwarded-For names the client (request.ip): none unless the operator says.
    trustProxy:
      typeof deps.trustProxy === "number"
        ? (
            (hops: number) => (_address: string, hop: number) =>
              hop < hops
          )(deps.trustProxy)
        : (deps.trustProxy ?? false),
    // A request that has not arrived whole in time is answered 408 and its connection closed
    // (clientErrorHandler below). Fastify's default, 0, has no bound: a body trickled a byte at
    // a time held a connection for ever, with or without a key.
    requestTimeout,
    http: {
      headersTimeout: Math.min(HEADERS_TIMEOUT_MS, requestTimeout),
      // Node looks for late requests this often (30 s by default): a short bound is kept closely.
      connectionsCheckingInterval: Math.min(30_000, Math.max(100, Math.floor(requestTimeout / 4))),
    },
    // A URL Fastify cannot route (bad percent-encoding, an over-long id): the error shape too.
    frameworkErrors: (error, _request, reply) => {
      const status =
        error.statusCode && error.statusCode >= 400 && error.statusCode < 500 ? error.statusCode : 400;
      // The option is typed for every route generic at once; this reply is a plain one.
      // Fastify's words quote the whole path (up to the header limit): said without it.
      const message =
        error.code === "FST_ERR_MAX_PARAM_LENGTH"
          ? "an id in the URL is longer than 100 characters: no session, run or batch id is"
          : error.code === "FST_ERR_BAD_URL"
            ? "the URL's path is not valid percent-encoding"
            : error.message;
      // Sent without the hooks (no route matched): the headers every answer has, set here.
      return withAnswerHeaders(reply as unknown as FastifyReply)
        .code(status)
        .send(errorBody("invalid_request", message));
    },
    // Bytes that are not HTTP at all: answered in the error shape before the socket closes.
    clientErrorHandler: (error, socket) => {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === "ECONNRESET" || socket.destroyed) return;
      const [status, message] =
        code === "ERR_HTTP_REQUEST_TIMEOUT"
          ? [408, "the request took too long to arrive"]
          : code === "HPE_HEADER_OVERFLOW"
            ? [431, "the request's headers are too large"]
            : [400, "the request is not valid HTTP/1.1"];
      const body = JSON.stringify(errorBody("invalid_request", message));
      if (socket.writable) {
        socket.write(
          `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/json; charset=utf-8\r\n` +
            `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
        );
      }
      socket.destroy(error);
    },
  });

  // A client that half-closes after its request still gets its answer; event streams end at
  // its FIN (event-stream.ts), so a reader that went away frees its slot at once.
  answerHalfClosedClients(app.server);

  app.setErrorHandler((error: Error, request, reply) => {
    countLimited(deps, error);
    return answerError(error, request, reply);
  });
  app.setNotFoundHandler((request, reply) =>
    reply.code(404).send(errorBody("not_found", `no route ${request.method} ${request.url}`)),
  );
  app.decorateRequest("tenant", "");
  // Every answer is read as the type it says (a 404 quotes the URL asked for), and none is kept
  // by a cache unless its route says otherwise (the console's page and assets): a tenant's
  // transcripts, results and errors had no cache header, and a browser kept them on disk.
  app.addHook("onSend", async (_request, reply, payload) => {
    withAnswerHeaders(reply);
    return payload;
  });
  // Before the body is read: a caller without a valid key gets nothing but a 401. Every route
  // needs a key, unknown ones included, except the open ones.
  // Admin routes need an admin key instead; then each tenant's request rate applies.
  app.addHook("onRequest", async (request, reply) => {
    if (OPEN_ROUTES.has(request.routeOptions.url ?? "")) return;
    // The console's static page: its data comes from /v1 routes with the key entered in it.
    if (isConsoleRoute(request.routeOptions.url)) return;
    const admin = isAdminRequest(request.routeOptions.url, request.url);
    if (admin) withAdminHeaders(reply);
    try {
      const tenant = await authenticated(deps, request, admin);
      if (tenant !== undefined) request.tenant = tenant;
    } catch (error) {
      // Answered here: Bull Board's routes have an error handler of their own.
      if (admin && error instanceof UnauthorizedError) return sendUnauthorized(reply, error);
      if (admin && error instanceof TooManyRequestsError) {
        countLimited(deps, error);
        return sendTooManyRequests(reply, error);
      }
      throw error;
    }
    if (!admin) await deps.rate?.admit(request.tenant);
  });
  // A big body, once it has arrived, waits for a place before it is parsed (big-bodies.ts); the
  // place is freed when its answer is sent or its connection is gone (the response's "close").
  // A whole big session's answer takes one of the same places (api-routes.ts).
  const bigBodies = new BigBodyGate(deps.bigBodies);
  const responses = new WeakMap<FastifyRequest, FastifyReply["raw"]>();
  app.addHook("preParsing", async (request, reply) => {
    responses.set(request, reply.raw);
  });
  app.removeContentTypeParser("application/json");
  // Read as bytes: Fastify's "string" decoding turned bytes that are not UTF-8 into U+FFFD.
  app.addContentTypeParser(
    "application/json",
    { parseAs: "buffer" },
    async (request: FastifyRequest, body: string | Buffer) => {
      const bytes = body as Buffer;
      const response = responses.get(request);
      const big = bytes.length >= BIG_BODY_BYTES;
      if (big && response) {
        const release = await bigBodies.enter();
        response.once("close", release);
        // Its client went away while it waited: nobody would hear the answer; the next one goes.
        if (response.closed) {
          release();
          throw Object.assign(new Error("the client went away before its body was worked on"), {
            statusCode: 400,
          });
        }
      }
      if (!big) return parseJsonBody(decodeJsonBody(bytes, request.headers));
      // Decoding, parsing and checking (preValidation) a big body: each a turn of its own, so
      // other requests are answered between them.
      const text = decodeJsonBody(bytes, request.headers);
      await nextTurn();
      const value = parseJsonBody(text);
      await nextTurn();
      return value;
    },
  );
  // Text is not JSON: without this, a JSON body sent as text/plain (what fetch sends for a
  // string body with no content-type) was read as one string, "expected object".
  app.removeContentTypeParser("text/plain");
  app.addHook("preValidation", async (request) => {
    // An id no route could find (request-checks.ts `unfindableId`) is a 404 naming it quoted.
    const id = (request.params as { id?: unknown } | undefined)?.id;
    const quoted = typeof id === "string" ? unfindableId(id) : undefined;
    if (quoted !== undefined) {
      const route = request.routeOptions.url ?? "";
      const what = route.startsWith("/v1/runs/")
        ? "run"
        : route.startsWith("/v1/batches/")
          ? "batch"
          : "session";
      throw new NotFoundError(`${what} ${quoted}`);
    }
    checkQuery(request.query);
    const path = originForm(request.url).split("?", 1)[0]!;
    const doc = ROUTE_DOCS[`${request.method} ${request.routeOptions.url ?? ""}`];
    checkRouteQuery(request.method, path, request.query, doc, NO_FIELDS);
    checkRepeatedQuery(path, request.query);
    checkBody(request.body);
  });

  if (deps.idempotency) idempotencyHooks(app, deps.idempotency);
  // Open event streams end first: the server cannot close while they hold their sockets.
  app.addHook("preClose", async () => {
    await deps.events?.close();
  });
  documentRoutes(app, deps.version ?? "0.0.0");
  if (deps.admin) app.register(deps.admin);
  if (deps.console) app.register(deps.console);
  app.register(async (api) => routes(api, deps, bigBodies));
  return app;
}
