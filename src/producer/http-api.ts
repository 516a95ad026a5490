/**
 * The HTTP API of contracts.md §4 (Fastify). 4xx answers say what is wrong and name the
 * field; 5xx answers hide internals (they are logged instead).
 */
import { STATUS_CODES } from "node:http";
import { Readable } from "node:stream";
import Fastify, { type FastifyError, type FastifyInstance, type FastifyReply } from "fastify";
import type { Registry } from "prom-client";
import {
  AgentResumeError,
  ConflictError,
  NotFoundError,
  TooManyRequestsError,
  ValidationError,
} from "../shared/errors.js";
import { findInJson, type JsonPath } from "../shared/json-walk.js";
import { formatPath, isStorableText, UNSTORABLE_TEXT, unstorableAt } from "../shared/messages.js";
import type { IdempotencyStore } from "../shared/store/idempotency.js";
import { isServiceUnavailable } from "../shared/unavailable.js";
import { UnauthorizedError } from "./auth.js";
import { isConsoleRoute } from "./console-route.js";
import type { Deletions } from "./deletions.js";
import type { EventStreams } from "./event-stream.js";
import type { FleetService } from "./fleet-service.js";
import { documentRoutes } from "./openapi.js";
import { legacyRequestHash, requestHash } from "./request-hash.js";
import type { SessionEventsSwitch } from "./session-events-switch.js";

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

export type ApiDeps = {
  service: FleetService;
  /** Who is calling: the tenant of an `Authorization` header, or UnauthorizedError. */
  auth: {
    authenticate(header: string | undefined, host?: string): Promise<string>;
    /** Admits a request to an admin route, or throws UnauthorizedError (401/403). */
    authenticateAdmin(header: string | undefined, host?: string): Promise<void>;
  };
  /** `Idempotency-Key` on `POST /v1/…` (contracts §9); without it the header is ignored. */
  idempotency?: Pick<IdempotencyStore, "begin" | "wait" | "complete" | "release">;
  /** A tenant's request rate (request-rate.ts): throws TooManyRequestsError when over it. */
  rate?: { admit(tenant: string): Promise<void> };
  /** Admin routes under ADMIN_PREFIX (Bull Board), registered on the app; behind admin keys. */
  admin?: (app: FastifyInstance) => Promise<void>;
  /** The console's page and assets under `/console` (console-route.ts), served without a key. */
  console?: (app: FastifyInstance) => Promise<void>;
  registry: Registry;
  healthy: () => Promise<boolean>;
  /** `DELETE /v1/sessions/:id` and `DELETE /v1/batches/:id` (deletions.ts); absent: 404 for every id. */
  deletions?: Pick<Deletions, "deleteSession" | "deleteBatch">;
  /** `PATCH /v1/sessions/:id` (session-events-switch.ts); absent: 404 for every id. */
  sessionEvents?: Pick<SessionEventsSwitch, "patch">;
  /** Event streams (contracts §7, SSE); absent: their routes answer 404 for every id. */
  events?: EventStreams;
  /** The package's version, for the OpenAPI document. */
  version?: string;
  /** pino level for the API's log; "silent" for none. */
  logLevel?: string;
};

type IdParams = { Params: { id: string } };

function errorBody(code: string, message: string, extra: Record<string, unknown> = {}) {
  return { error: { code, message, ...extra } };
}

/** Nesting a JSON body may have: deeper values could not be stored (JSON.stringify recurses). */
export const MAX_JSON_DEPTH = 100;
/** How many levels of a too-deep value's path its 400 names (`metadata.x[0]`). */
const NAMED_LEVELS = 3;

/**
 * Every query parameter is text Postgres could compare (no U+0000, no lone surrogate): a 400
 * naming it, where the query's value would otherwise reach SQL (`?batch=%00` was a 500).
 */
function checkQuery(query: unknown): void {
  if (!isObject(query)) return;
  for (const [key, value] of Object.entries(query))
    for (const text of Array.isArray(value) ? value : [value])
      if (typeof text === "string" && !(isStorableText(text) && isStorableText(key)))
        throw isStorableText(key)
          ? new ValidationError(key, UNSTORABLE_TEXT)
          : new ValidationError("", `a query parameter's name ${UNSTORABLE_TEXT}`);
}

/** Parses a JSON body: what cannot be parsed is a 400 saying why (checkBody checks the rest). */
function parseJsonBody(text: string): unknown {
  if (text.length === 0) throw new ValidationError("", "the body is empty; it must be a JSON value");
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    // Only where: V8's message quotes the body, which is the caller's and may be long.
    const at = /position (\d+)/.exec((error as Error).message)?.[1];
    throw new ValidationError("", `the body is not valid JSON${at ? ` (at position ${at})` : ""}`);
  }
  return value;
}

/**
 * Agents and models are parsed by agent-config.ts, which stores a scripted model's steps
 * (model output) with unstorable code units replaced and refuses them anywhere else.
 */
const parsedAsAgent = (depth: number, path: () => JsonPath): boolean => {
  if (depth > 3) return false;
  const [first, second, third] = path();
  if (depth === 1) return first === "agent" || first === "model";
  return depth === 3 && first === "sessions" && typeof second === "number" && third === "agent";
};

const isObject = (value: unknown): value is object => value !== null && typeof value === "object";

/**
 * Checks a parsed JSON body before any route sees it, in one walk (json-walk.ts: nothing is
 * allocated per value, so a body of millions of values costs about what parsing it did):
 * - no key that could rewrite an object's prototype once some code assigns it (`__proto__`,
 *   or `constructor` holding `prototype`; Fastify's own parser calls both "not valid JSON");
 * - not nested deeper than MAX_JSON_DEPTH (the field cut to its first levels);
 * - no number beyond a double (JSON.parse makes `1e400` Infinity, stored as null);
 * - every string and key other than agents' storable as it is (no U+0000, no lone
 *   surrogate: Postgres refuses them).
 * Each is a 400 naming the field — `content`, `metadata.note`, `messages[2].content`.
 */
function checkBody(body: unknown): void {
  let message = "";
  let suffix: string | null = null;
  /** A too-deep value is named by its first levels only. */
  let cut = false;
  /** The depth of the agent being walked through; -1: none. */
  let agentDepth = -1;
  const path = findInJson(body, (item, key, depth, pathOf) => {
    if (agentDepth >= 0 && depth <= agentDepth) agentDepth = -1;
    if (key === "__proto__" || (key === "constructor" && isObject(item) && "prototype" in item)) {
      message = "this key is not accepted";
      if (key === "constructor") suffix = "prototype";
      return "stop";
    }
    if (isObject(item) && depth >= MAX_JSON_DEPTH) {
      message = `nests deeper than ${MAX_JSON_DEPTH} levels`;
      cut = true;
      return "stop";
    }
    if (typeof item === "number" && !Number.isFinite(item)) {
      message = "is a number too large for a JSON double";
      return "stop";
    }
    if (agentDepth >= 0) return undefined;
    if (unstorableAt(item, key)) {
      message = UNSTORABLE_TEXT;
      return "stop";
    }
    if (isObject(item) && parsedAsAgent(depth, pathOf)) agentDepth = depth;
    return undefined;
  });
  if (path === undefined) return;
  const named = cut ? path.slice(0, NAMED_LEVELS) : path;
  throw new ValidationError(formatPath("", suffix ? [...named, suffix] : named), message);
}

/** The largest request body, in bytes: imported histories can be long. */
const BODY_LIMIT = 16 * 1024 * 1024;

/** Fastify's refusals of a body before any route sees it, said the API's way (413, 415). */
function bodyRefusal(
  error: Pick<FastifyError, "code">,
  contentType: string | undefined,
): { status: number; body: ReturnType<typeof errorBody> } | undefined {
  if (error.code === "FST_ERR_CTP_BODY_TOO_LARGE")
    return {
      status: 413,
      body: errorBody("invalid_request", `the body is larger than ${BODY_LIMIT / 1024 / 1024} MiB`),
    };
  if (error.code === "FST_ERR_CTP_INVALID_MEDIA_TYPE")
    return {
      status: 415,
      body: errorBody(
        "invalid_request",
        `the body must be JSON sent with Content-Type: application/json, not ${JSON.stringify((contentType ?? "").slice(0, 100))}`,
        { field: "Content-Type" },
      ),
    };
  return undefined;
}

/** 401 with the challenge the caller should answer (Basic prompts a browser), or 403. */
function sendUnauthorized(reply: FastifyReply, error: UnauthorizedError): FastifyReply {
  if (error.status === 403) return reply.code(403).send(errorBody("forbidden", error.message));
  const challenge = error.challenge === "Basic" ? 'Basic realm="agent-fleet admin"' : "Bearer";
  return reply.code(401).header("www-authenticate", challenge).send(errorBody("unauthorized", error.message));
}

export function buildApi(deps: ApiDeps): FastifyInstance {
  const app = Fastify({
    logger: { level: deps.logLevel ?? "info", base: { role: "api" } },
    bodyLimit: BODY_LIMIT,
    // A URL Fastify cannot route (bad percent-encoding, an over-long id): the error shape too.
    frameworkErrors: (error, _request, reply) => {
      const status =
        error.statusCode && error.statusCode >= 400 && error.statusCode < 500 ? error.statusCode : 400;
      // The option is typed for every route generic at once; this reply is a plain one.
      return (reply as unknown as FastifyReply)
        .code(status)
        .send(errorBody("invalid_request", error.message));
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

  app.setErrorHandler((error: FastifyError | Error, request, reply) => {
    if (error instanceof UnauthorizedError) return sendUnauthorized(reply, error);
    if (error instanceof TooManyRequestsError) {
      return reply
        .code(429)
        .header("retry-after", String(error.retryAfterSeconds))
        .send(
          errorBody("too_many_requests", error.message, {
            limit: error.limit,
            retryAfter: error.retryAfterSeconds,
          }),
        );
    }
    if (error instanceof ValidationError) {
      return reply.code(400).send(errorBody("invalid_request", error.message, { field: error.field }));
    }
    if (error instanceof NotFoundError) return reply.code(404).send(errorBody("not_found", error.message));
    if (error instanceof ConflictError) {
      return reply.code(409).send(errorBody("conflict", error.message, { reason: error.reason }));
    }
    if (error instanceof AgentResumeError) {
      return reply.code(409).send(errorBody("not_resumable", error.message, { reason: error.reason }));
    }
    const framework = bodyRefusal(error as FastifyError, request.headers["content-type"]);
    if (framework) return reply.code(framework.status).send(framework.body);
    const status = (error as FastifyError).statusCode;
    if (status && status >= 400 && status < 500) {
      return reply.code(status).send(errorBody("invalid_request", error.message));
    }
    if (isServiceUnavailable(error)) {
      // Its message, not its stack: during an outage every request says the same (the
      // outage itself is logged once, when Redis goes and when it is back: RedisOutageLog).
      request.log.warn(
        { error: (error as Error).message },
        "request failed: Postgres or Redis is unavailable",
      );
      return reply
        .code(503)
        .header("retry-after", "1")
        .send(
          errorBody(
            "unavailable",
            "a service the fleet needs (Postgres or Redis) is unreachable or refusing work; try again shortly",
          ),
        );
    }
    request.log.error({ err: error }, "request failed");
    return reply.code(500).send(errorBody("internal", "internal error; see the API's log"));
  });
  app.setNotFoundHandler((request, reply) =>
    reply.code(404).send(errorBody("not_found", `no route ${request.method} ${request.url}`)),
  );
  app.decorateRequest("tenant", "");
  // Before the body is read: a caller without a valid key gets nothing but a 401. Every route
  // needs a key, unknown ones included, except the open ones.
  // Admin routes need an admin key instead; then each tenant's request rate applies.
  app.addHook("onRequest", async (request, reply) => {
    if (OPEN_ROUTES.has(request.routeOptions.url ?? "")) return;
    // The console's static page: its data comes from /v1 routes with the key entered in it.
    if (isConsoleRoute(request.routeOptions.url)) return;
    if (isAdminRequest(request.routeOptions.url, request.url)) {
      // Answered here: Bull Board's routes have an error handler of their own.
      try {
        await deps.auth.authenticateAdmin(request.headers.authorization, request.headers.host);
      } catch (error) {
        if (error instanceof UnauthorizedError) return sendUnauthorized(reply, error);
        throw error;
      }
      return;
    }
    request.tenant = await deps.auth.authenticate(request.headers.authorization, request.headers.host);
    await deps.rate?.admit(request.tenant);
  });
  app.removeContentTypeParser("application/json");
  app.addContentTypeParser("application/json", { parseAs: "string" }, (_request, body, done) => {
    try {
      done(null, parseJsonBody(body as string));
    } catch (error) {
      done(error as ValidationError, undefined);
    }
  });
  // Text is not JSON: without this, a JSON body sent as text/plain (what fetch sends for a
  // string body with no content-type) was read as one string, "expected object".
  app.removeContentTypeParser("text/plain");
  app.addHook("preValidation", async (request) => {
    // No session or run id holds NUL or a lone surrogate (Postgres could not even compare one).
    const id = (request.params as { id?: unknown } | undefined)?.id;
    if (typeof id === "string" && !isStorableText(id)) {
      const route = request.routeOptions.url ?? "";
      const what = route.startsWith("/v1/runs/")
        ? "run"
        : route.startsWith("/v1/batches/")
          ? "batch"
          : "session";
      throw new NotFoundError(`${what} ${JSON.stringify(id)}`);
    }
    checkQuery(request.query);
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
  app.register(async (api) => routes(api, deps));
  return app;
}

/** How long a request waits for the answer of an earlier one with its Idempotency-Key. */
const IDEMPOTENCY_WAIT_MS = 30_000;
const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,255}$/;

/**
 * `Idempotency-Key` on every `POST /v1/…` (contracts §9) and `DELETE /v1/…`: after the body is parsed and the
 * caller known, the key is claimed in Postgres before the handler acts; the answer is
 * stored as it is sent. The same key with the same method, path and body replays it (also
 * while the first request is still being answered: this one waits for it); with another
 * body it is a 409 `idempotency_key_reused`.
 */
function idempotencyHooks(app: FastifyInstance, store: NonNullable<ApiDeps["idempotency"]>): void {
  app.decorateRequest("idempotencyKey", "");
  app.addHook("preHandler", async (request, reply) => {
    const header = request.headers["idempotency-key"];
    if (request.method !== "POST" && request.method !== "DELETE") return;
    if (header === undefined || !request.url.startsWith("/v1/")) return;
    const key = Array.isArray(header) ? header[0]! : header;
    if (!IDEMPOTENCY_KEY.test(key))
      throw new ValidationError("Idempotency-Key", "must be 1 to 255 visible ASCII characters");
    let hash = requestHash(request.method, request.url, request.body);
    let state = await store.begin(request.tenant, key, hash);
    if (state.state === "reused") {
      // Stored by a release that hashed the body in its own key order: the same request
      // still replays (or waits) rather than being refused.
      const legacy = legacyRequestHash(request.method, request.url, request.body);
      if (legacy !== hash) {
        const again = await store.begin(request.tenant, key, legacy);
        if (again.state !== "reused") [hash, state] = [legacy, again];
      }
    }
    if (state.state === "pending") state = await store.wait(request.tenant, key, hash, IDEMPOTENCY_WAIT_MS);
    switch (state.state) {
      case "new":
        request.idempotencyKey = key;
        return;
      case "reused":
        throw new ConflictError(
          "idempotency_key_reused",
          "this Idempotency-Key was used with another request body within 24 h",
        );
      case "pending":
        throw new ConflictError(
          "idempotency_key_in_use",
          "a request with this Idempotency-Key is still being answered; try again",
        );
      case "replay":
        return reply
          .code(state.statusCode)
          .header("content-type", "application/json; charset=utf-8")
          .header("idempotent-replayed", "true")
          .send(state.response);
    }
  });
  app.addHook("onSend", async (request, reply, payload) => {
    if (!request.idempotencyKey) return payload;
    const key = request.idempotencyKey;
    request.idempotencyKey = "";
    const status = reply.statusCode;
    if (status >= 500 || status === 429 || typeof payload !== "string")
      await store.release(request.tenant, key);
    else await store.complete(request.tenant, key, status, payload);
    return payload;
  });
}

/** Results as NDJSON: one line per item, pulled as the client reads (backpressure). */
function ndjson(items: AsyncIterable<unknown>): Readable {
  return Readable.from(
    (async function* () {
      for await (const item of items) yield `${JSON.stringify(item)}\n`;
    })(),
  );
}

/** The routes, declared in a plugin so that the OpenAPI document (registered first) sees them. */
function routes(app: FastifyInstance, deps: ApiDeps): void {
  const { service } = deps;
  app.post("/v1/sessions", async (request, reply) =>
    reply.code(201).send(await service.createSession(request.tenant, request.body)),
  );
  app.post("/v1/batches", async (request, reply) =>
    reply.code(201).send(await service.createBatch(request.tenant, request.body)),
  );
  app.post<IdParams>("/v1/batches/:id/sessions", async (request, reply) =>
    reply.code(201).send(await service.appendToBatch(request.tenant, request.params.id, request.body)),
  );
  app.get<IdParams>("/v1/batches/:id", async (request) =>
    service.getBatch(request.tenant, request.params.id, request.query),
  );
  app.get<IdParams>("/v1/batches/:id/results", async (request, reply) => {
    const results = await service.batchResults(request.tenant, request.params.id);
    return reply.header("content-type", "application/x-ndjson; charset=utf-8").send(ndjson(results));
  });
  app.get<IdParams>("/v1/batches/:id/events", async (request, reply) => {
    if (!deps.events) throw new NotFoundError(`batch ${request.params.id}`);
    await deps.events.batch(request, reply, request.tenant, request.params.id);
    return reply;
  });
  app.get<IdParams>("/v1/sessions/:id/events", async (request, reply) => {
    if (!deps.events) throw new NotFoundError(`session ${request.params.id}`);
    await deps.events.session(request, reply, request.tenant, request.params.id);
    return reply;
  });
  app.post<IdParams>("/v1/batches/:id/cancel", async (request, reply) =>
    reply.code(202).send(await service.cancelBatch(request.tenant, request.params.id)),
  );
  app.post<IdParams>("/v1/batches/:id/resume", async (request, reply) =>
    reply.code(202).send(await service.resumeBatch(request.tenant, request.params.id, request.body)),
  );
  app.post<IdParams>("/v1/sessions/:id/cancel", async (request, reply) =>
    reply.code(202).send(await service.cancelSession(request.tenant, request.params.id)),
  );
  app.delete<IdParams>("/v1/sessions/:id", async (request) => {
    if (!deps.deletions) throw new NotFoundError(`session ${request.params.id}`);
    return deps.deletions.deleteSession(request.tenant, request.params.id);
  });
  app.delete<IdParams>("/v1/batches/:id", async (request) => {
    if (!deps.deletions) throw new NotFoundError(`batch ${request.params.id}`);
    return deps.deletions.deleteBatch(request.tenant, request.params.id);
  });
  app.patch<IdParams>("/v1/sessions/:id", async (request) => {
    if (!deps.sessionEvents) throw new NotFoundError(`session ${request.params.id}`);
    return deps.sessionEvents.patch(request.tenant, request.params.id, request.body);
  });
  app.get("/v1/sessions", async (request) => service.listSessions(request.tenant, request.query));
  app.post<IdParams>("/v1/sessions/:id/messages", async (request, reply) =>
    reply.code(202).send(await service.sendMessage(request.tenant, request.params.id, request.body)),
  );
  app.post<IdParams>("/v1/sessions/:id/history", async (request) =>
    service.importMessages(request.tenant, request.params.id, request.body),
  );
  app.post<IdParams>("/v1/sessions/:id/resume", async (request, reply) =>
    reply.code(202).send(await service.resume(request.tenant, request.params.id, request.body)),
  );
  app.get<IdParams>("/v1/sessions/:id", async (request) =>
    service.getSession(request.tenant, request.params.id, request.query),
  );
  app.get<IdParams>("/v1/sessions/:id/resume-point", async (request) =>
    service.resumePoint(request.tenant, request.params.id),
  );
  app.get<IdParams>("/v1/runs/:id", async (request) => service.getRun(request.tenant, request.params.id));
  // Scrapes and probes come every few seconds: their requests are not logged (errors still are).
  const quiet = { logLevel: "warn" as const };
  app.get("/metrics", quiet, async (_request, reply) =>
    reply.header("content-type", deps.registry.contentType).send(await deps.registry.metrics()),
  );
  app.get("/healthz", quiet, async (_request, reply) => {
    const ok = await deps.healthy().catch(() => false);
    return reply.code(ok ? 200 : 503).send({ ok });
  });
  app.get("/v1/openapi.json", async () => app.swagger());
}
