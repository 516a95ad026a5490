/**
 * The HTTP API of contracts.md §4 (Fastify). 4xx answers say what is wrong and name the
 * field; 5xx answers hide internals (they are logged instead).
 */
import { STATUS_CODES } from "node:http";
import Fastify, { type FastifyError, type FastifyInstance, type FastifyReply } from "fastify";
import type { Registry } from "prom-client";
import { AgentResumeError, NotFoundError, ValidationError } from "../shared/errors.js";
import { childPath, isStorableText, UNSTORABLE_TEXT, unstorableField } from "../shared/messages.js";
import { UnauthorizedError } from "./auth.js";
import type { FleetService } from "./fleet-service.js";

declare module "fastify" {
  interface FastifyRequest {
    /** The caller's tenant (auth.ts), set before the body is read on every route but the open ones. */
    tenant: string;
  }
}

/** Routes served without a key: Prometheus and health checks. */
const OPEN_ROUTES = new Set(["/metrics", "/healthz"]);

export type ApiDeps = {
  service: FleetService;
  /** Who is calling: the tenant of an `Authorization` header, or UnauthorizedError. */
  auth: { authenticate(header: string | undefined): Promise<string> };
  registry: Registry;
  healthy: () => Promise<boolean>;
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

/** The field (cut to its first levels) where `value` nests deeper than MAX_JSON_DEPTH. Iterative. */
function tooDeepField(value: unknown): string | undefined {
  const stack: [unknown, string, number][] = [[value, "", 0]];
  while (stack.length > 0) {
    const [item, field, depth] = stack.pop()!;
    if (item === null || typeof item !== "object") continue;
    if (depth >= MAX_JSON_DEPTH) return field;
    const entries = Array.isArray(item) ? item.entries() : Object.entries(item);
    for (const [key, child] of entries) {
      stack.push([child, depth < NAMED_LEVELS ? childPath(field, key) : field, depth + 1]);
    }
  }
  return undefined;
}

/**
 * The first key of a parsed body that could rewrite an object's prototype once some code
 * assigns it (`__proto__`, or `constructor` holding `prototype`), as a field; iterative.
 */
function prototypeKeyField(value: unknown): string | undefined {
  const stack: [unknown, string][] = [[value, ""]];
  while (stack.length > 0) {
    const [item, field] = stack.pop()!;
    if (item === null || typeof item !== "object") continue;
    const entries = Array.isArray(item) ? [...item.entries()] : Object.entries(item);
    for (const [key, child] of entries) {
      const path = childPath(field, key);
      if (key === "__proto__") return path;
      if (key === "constructor" && child !== null && typeof child === "object" && "prototype" in child) {
        return childPath(path, "prototype");
      }
      stack.push([child, path]);
    }
  }
  return undefined;
}

/**
 * Parses a JSON body: what cannot be parsed is a 400 saying why, and a key that could
 * rewrite a prototype is a 400 naming it (Fastify's own parser calls both "not valid JSON").
 */
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
  if (/__proto__|constructor/.test(text)) {
    const field = prototypeKeyField(value);
    if (field !== undefined) throw new ValidationError(field, "this key is not accepted");
  }
  return value;
}

/**
 * Agents and models are parsed by agent-config.ts, which stores a scripted model's steps
 * (model output) with unstorable code units replaced and refuses them anywhere else.
 */
const parsedAsAgent = (field: string) =>
  field === "agent" || field === "model" || /^sessions\[\d+\]\.agent$/.test(field);

/**
 * Checks a parsed JSON body before any route sees it: not nested too deep, and every string
 * other than agents' is storable as it is (no U+0000, no lone surrogate: Postgres refuses
 * them). Both are 400s naming the field — `content`, `metadata.note`, `messages[2].content`.
 */
function checkBody(body: unknown): void {
  const deep = tooDeepField(body);
  if (deep !== undefined) throw new ValidationError(deep, `nests deeper than ${MAX_JSON_DEPTH} levels`);
  const unstorable = unstorableField(body, "", parsedAsAgent);
  if (unstorable !== undefined) throw new ValidationError(unstorable, UNSTORABLE_TEXT);
}

export function buildApi(deps: ApiDeps): FastifyInstance {
  const app = Fastify({
    logger: { level: deps.logLevel ?? "info", base: { role: "api" } },
    // Imported histories can be long.
    bodyLimit: 16 * 1024 * 1024,
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
    if (error instanceof UnauthorizedError) {
      return reply
        .code(401)
        .header("www-authenticate", "Bearer")
        .send(errorBody("unauthorized", error.message));
    }
    if (error instanceof ValidationError) {
      return reply.code(400).send(errorBody("invalid_request", error.message, { field: error.field }));
    }
    if (error instanceof NotFoundError) return reply.code(404).send(errorBody("not_found", error.message));
    if (error instanceof AgentResumeError) {
      return reply.code(409).send(errorBody("not_resumable", error.message, { reason: error.reason }));
    }
    const status = (error as FastifyError).statusCode;
    if (status && status >= 400 && status < 500) {
      return reply.code(status).send(errorBody("invalid_request", error.message));
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
  app.addHook("onRequest", async (request) => {
    if (OPEN_ROUTES.has(request.routeOptions.url ?? "")) return;
    request.tenant = await deps.auth.authenticate(request.headers.authorization);
  });
  app.removeContentTypeParser("application/json");
  app.addContentTypeParser("application/json", { parseAs: "string" }, (_request, body, done) => {
    try {
      done(null, parseJsonBody(body as string));
    } catch (error) {
      done(error as ValidationError, undefined);
    }
  });
  app.addHook("preValidation", async (request) => {
    // No session or run id holds NUL or a lone surrogate (Postgres could not even compare one).
    const id = (request.params as { id?: unknown } | undefined)?.id;
    if (typeof id === "string" && !isStorableText(id)) {
      const what = request.routeOptions.url?.startsWith("/v1/runs/") ? "run" : "session";
      throw new NotFoundError(`${what} ${JSON.stringify(id)}`);
    }
    checkBody(request.body);
  });

  const { service } = deps;
  app.post("/v1/sessions", async (request, reply) =>
    reply.code(201).send(await service.createSession(request.tenant, request.body)),
  );
  app.post("/v1/batches", async (request, reply) =>
    reply.code(201).send(await service.createBatch(request.tenant, request.body)),
  );
  app.get("/v1/sessions", async (request) => service.listSessions(request.tenant, request.query));
  app.post<IdParams>("/v1/sessions/:id/messages", async (request, reply) =>
    reply.code(202).send(await service.sendMessage(request.tenant, request.params.id, request.body)),
  );
  app.post<IdParams>("/v1/sessions/:id/resume", async (request, reply) =>
    reply.code(202).send(await service.resume(request.tenant, request.params.id, request.body)),
  );
  app.get<IdParams>("/v1/sessions/:id", async (request) =>
    service.getSession(request.tenant, request.params.id),
  );
  app.get<IdParams>("/v1/sessions/:id/resume-point", async (request) =>
    service.resumePoint(request.tenant, request.params.id),
  );
  app.get<IdParams>("/v1/runs/:id", async (request) => service.getRun(request.tenant, request.params.id));
  app.get("/metrics", async (_request, reply) =>
    reply.header("content-type", deps.registry.contentType).send(await deps.registry.metrics()),
  );
  app.get("/healthz", async (_request, reply) => {
    const ok = await deps.healthy().catch(() => false);
    return reply.code(ok ? 200 : 503).send({ ok });
  });
  return app;
}
