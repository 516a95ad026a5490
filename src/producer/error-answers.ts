/**
 * How the API answers what went wrong, in one error shape (`{ error: { code, message, … } }`):
 * 4xx answers say what is wrong and name the field; 5xx answers hide internals (they are
 * logged instead).
 */
import type { FastifyError, FastifyReply, FastifyRequest } from "fastify";
import {
  AgentResumeError,
  ConflictError,
  NotFoundError,
  TooManyRequestsError,
  ValidationError,
} from "../shared/errors.js";
import { isServiceUnavailable } from "../shared/unavailable.js";
import { UnauthorizedError } from "./auth.js";
import { UnsupportedBodyError } from "./request-checks.js";
import { BODY_LIMIT } from "./request-limits.js";

export function errorBody(code: string, message: string, extra: Record<string, unknown> = {}) {
  return { error: { code, message, ...extra } };
}

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
export function sendUnauthorized(reply: FastifyReply, error: UnauthorizedError): FastifyReply {
  if (error.status === 403) return reply.code(403).send(errorBody("forbidden", error.message));
  const challenge = error.challenge === "Basic" ? 'Basic realm="agent-fleet admin"' : "Bearer";
  return reply.code(401).header("www-authenticate", challenge).send(errorBody("unauthorized", error.message));
}

/** 429 with Retry-After, naming the limit. */
export function sendTooManyRequests(reply: FastifyReply, error: TooManyRequestsError): FastifyReply {
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

/** The API's error handler: each error class its answer, anything else a 503 or a logged 500. */
export function answerError(error: FastifyError | Error, request: FastifyRequest, reply: FastifyReply) {
  if (error instanceof UnauthorizedError) return sendUnauthorized(reply, error);
  if (error instanceof TooManyRequestsError) return sendTooManyRequests(reply, error);
  if (error instanceof ValidationError) {
    return reply.code(400).send(errorBody("invalid_request", error.message, { field: error.field }));
  }
  if (error instanceof UnsupportedBodyError)
    return reply.code(415).send(errorBody("invalid_request", error.message, { field: error.field }));
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
    request.log.warn({ error: (error as Error).message }, "request failed: Postgres or Redis is unavailable");
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
}
