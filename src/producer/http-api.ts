/**
 * The HTTP API of contracts.md §4 (Fastify). 4xx answers say what is wrong and name the
 * field; 5xx answers hide internals (they are logged instead).
 */
import Fastify, { type FastifyError, type FastifyInstance } from "fastify";
import type { Registry } from "prom-client";
import { AgentResumeError, NotFoundError, ValidationError } from "../shared/errors.js";
import type { FleetService } from "./fleet-service.js";

export type ApiDeps = {
  service: FleetService;
  registry: Registry;
  healthy: () => Promise<boolean>;
  /** pino level for the API's log; "silent" for none. */
  logLevel?: string;
};

type IdParams = { Params: { id: string } };

function errorBody(code: string, message: string, extra: Record<string, unknown> = {}) {
  return { error: { code, message, ...extra } };
}

export function buildApi(deps: ApiDeps): FastifyInstance {
  const app = Fastify({
    logger: { level: deps.logLevel ?? "info", base: { role: "api" } },
    // Imported histories can be long.
    bodyLimit: 16 * 1024 * 1024,
  });

  app.setErrorHandler((error: FastifyError | Error, request, reply) => {
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

  const { service } = deps;
  app.post("/v1/sessions", async (request, reply) =>
    reply.code(201).send(await service.createSession(request.body)),
  );
  app.post("/v1/batches", async (request, reply) =>
    reply.code(201).send(await service.createBatch(request.body)),
  );
  app.get("/v1/sessions", async (request) => service.listSessions(request.query));
  app.post<IdParams>("/v1/sessions/:id/messages", async (request, reply) =>
    reply.code(202).send(await service.sendMessage(request.params.id, request.body)),
  );
  app.post<IdParams>("/v1/sessions/:id/resume", async (request, reply) =>
    reply.code(202).send(await service.resume(request.params.id, request.body)),
  );
  app.get<IdParams>("/v1/sessions/:id", async (request) => service.getSession(request.params.id));
  app.get<IdParams>("/v1/sessions/:id/resume-point", async (request) =>
    service.resumePoint(request.params.id),
  );
  app.get<IdParams>("/v1/runs/:id", async (request) => service.getRun(request.params.id));
  app.get("/metrics", async (_request, reply) =>
    reply.header("content-type", deps.registry.contentType).send(await deps.registry.metrics()),
  );
  app.get("/healthz", async (_request, reply) => {
    const ok = await deps.healthy().catch(() => false);
    return reply.code(ok ? 200 : 503).send({ ok });
  });
  return app;
}
