/** The API's routes (contracts §4): each hands the caller's tenant and input to what acts on it. */
import { Readable } from "node:stream";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { NotFoundError } from "../shared/errors.js";
import type { ApiDeps } from "./api-deps.js";
import { UnauthorizedError } from "./auth.js";
import { watchedAnswer } from "./big-answers.js";
import { BIG_BODY_BYTES, type BigBodyGate } from "./big-bodies.js";
import { noFieldsBody, parseBody } from "./request-bodies.js";
import { closeWhenRevoked } from "./revoked-answers.js";
import { closeWhenStalled, DEFAULT_ANSWER_STALL_MS } from "./stalled-answers.js";
import { TenantReadSlots } from "./tenant-read-slots.js";

type IdParams = { Params: { id: string } };

const NO_TENANT_SECRET =
  "this fleet has no webhook secret per tenant (FLEET_WEBHOOK_SECRET_PER_TENANT is off): " +
  "every webhook is signed with the fleet's FLEET_WEBHOOK_SECRET, which the operator holds";

/** What a batch's results are sent as. */
const NDJSON = "application/x-ndjson; charset=utf-8";
/** What a session's answer is sent as. */
const JSON_TYPE = "application/json; charset=utf-8";

/** Results as NDJSON: one line per item, pulled as the client reads (backpressure). */
function ndjson(items: AsyncIterable<unknown>): Readable {
  return Readable.from(
    (async function* () {
      for await (const item of items) yield `${JSON.stringify(item)}\n`;
    })(),
  );
}

/** Whether the request's key still works for the tenant it was answered as (a 401 now: no). */
async function stillServes(deps: ApiDeps, request: FastifyRequest): Promise<boolean> {
  try {
    return (await deps.auth.authenticate(request.headers.authorization, request.headers)) === request.tenant;
  } catch (error) {
    if (error instanceof UnauthorizedError) return false;
    throw error;
  }
}

/** The routes, declared in a plugin so that the OpenAPI document (registered first) sees them. */
export function routes(app: FastifyInstance, deps: ApiDeps, bigWork: BigBodyGate): void {
  const { service } = deps;
  const resultsReads = new TenantReadSlots(deps.resultsReadsPerTenant, deps.tenantSlots);
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
    // A HEAD (`curl -I`, a monitor) gets the checks' answer and the results' head, and nothing
    // is read: Fastify hands a HEAD's body stream to resume(), which read every page of results
    // and threw it away, holding one of the tenant's places until it was done.
    if (request.method === "HEAD") {
      await service.batchResults(request.tenant, request.params.id, undefined, undefined, request.query);
      return reply.header("content-type", NDJSON).send(Readable.from([]));
    }
    // At most FLEET_RESULTS_MAX_READS_PER_TENANT of them open per tenant across the fleet, each
    // held until its response closes, however it ends (tenant-read-slots.ts).
    const release = await resultsReads.admit(request.tenant, reply.raw);
    let results: AsyncIterable<unknown>;
    try {
      results = await service.batchResults(
        request.tenant,
        request.params.id,
        undefined,
        undefined,
        request.query,
      );
    } catch (error) {
      release();
      throw error;
    }
    // A reader that takes nothing does not hold its page and connection for ever (stalled-answers.ts).
    closeWhenStalled(reply.raw, deps.answerStallMs ?? DEFAULT_ANSWER_STALL_MS, () =>
      request.log.info("batch results reader took nothing for FLEET_SSE_STALL_MS; closed its connection"),
    );
    // Nor does a key revoked meanwhile go on reading them (revoked-answers.ts).
    closeWhenRevoked(
      reply.raw,
      () => stillServes(deps, request),
      () => request.log.info("batch results reader's key no longer works; closed its connection"),
    );
    return reply.header("content-type", NDJSON).send(ndjson(results));
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
  app.post<IdParams>("/v1/batches/:id/cancel", async (request, reply) => {
    parseBody(noFieldsBody, request.body);
    return reply.code(202).send(await service.cancelBatch(request.tenant, request.params.id));
  });
  app.post<IdParams>("/v1/batches/:id/resume", async (request, reply) =>
    reply.code(202).send(await service.resumeBatch(request.tenant, request.params.id, request.body)),
  );
  app.post<IdParams>("/v1/sessions/:id/cancel", async (request, reply) => {
    parseBody(noFieldsBody, request.body);
    return reply.code(202).send(await service.cancelSession(request.tenant, request.params.id));
  });
  // A DELETE takes no body or `{}`: an option it does not have (`{"dryRun": true}`) is a 400,
  // not a deletion that ignored it.
  app.delete<IdParams>("/v1/sessions/:id", async (request) => {
    parseBody(noFieldsBody, request.body);
    if (!deps.deletions) throw new NotFoundError(`session ${request.params.id}`);
    return deps.deletions.deleteSession(request.tenant, request.params.id);
  });
  app.delete<IdParams>("/v1/batches/:id", async (request) => {
    parseBody(noFieldsBody, request.body);
    if (!deps.deletions) throw new NotFoundError(`batch ${request.params.id}`);
    return deps.deletions.deleteBatch(request.tenant, request.params.id);
  });
  // Turning a big session's stream on writes its history (up to the events kept) into the
  // stream, read whole: it waits for a place of the big work as its whole answer does.
  app.patch<IdParams>("/v1/sessions/:id", async (request) => {
    if (!deps.sessionEvents) throw new NotFoundError(`session ${request.params.id}`);
    const { tenant, params } = request;
    return deps.sessionEvents.patch(tenant, params.id, request.body, async () =>
      (await service.historyBytes(tenant, params.id)) < BIG_BODY_BYTES ? undefined : bigWork.enter("stream"),
    );
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
  // A big unpaged answer (a whole big session, or a big part after `afterSeq`) is built in
  // memory: it waits for a place of the big work (big-bodies.ts), held until its answer is
  // sent or its client is gone. A small part of a big session (a poll of its tail) never waits.
  // It is sent in pieces, and its connection closed once its client takes nothing of it for
  // FLEET_SSE_STALL_MS (big-answers.ts): a client that read nothing held its place for ever.
  // Nor is it sent on once its key is revoked (test/big-answer-key-revoked.test.ts).
  app.get<IdParams>("/v1/sessions/:id", async (request, reply) => {
    // A HEAD of a big answer gets the GET's checks and head, and nothing is read: Fastify
    // answers HEAD with this route, which read the whole history and took a place of the big
    // work (or got a 429 waiting for one) for a body it then threw away. A small answer's
    // HEAD is the GET's, with its length.
    if (request.method === "HEAD") {
      const bytes = await service.sessionAnswerBytes(request.tenant, request.params.id, request.query);
      if (bytes >= BIG_BODY_BYTES) return reply.header("content-type", JSON_TYPE).send(Readable.from([]));
    }
    let big = false;
    const session = await service.getSession(
      request.tenant,
      request.params.id,
      request.query,
      async (answerBytes) => {
        if (answerBytes < BIG_BODY_BYTES) return;
        const release = await bigWork.enter("answer");
        reply.raw.once("close", release);
        if (reply.raw.closed) {
          release();
          throw Object.assign(new Error("the client went away before its answer was read"), {
            statusCode: 400,
          });
        }
        big = true;
      },
    );
    if (!big) return session;
    // Sent for as long as its reader takes a piece now and then: not to a key revoked meanwhile.
    closeWhenRevoked(
      reply.raw,
      () => stillServes(deps, request),
      () => request.log.info("big session answer's key no longer works; closed its connection"),
    );
    // Its length said as before (not chunked): a cut answer is seen short of it.
    const text = JSON.stringify(session);
    return reply
      .header("content-type", JSON_TYPE)
      .header("content-length", Buffer.byteLength(text))
      .send(watchedAnswer(text, reply.raw, deps.answerStallMs ?? DEFAULT_ANSWER_STALL_MS));
  });
  app.get<IdParams>("/v1/sessions/:id/resume-point", async (request) =>
    service.resumePoint(request.tenant, request.params.id),
  );
  app.get<IdParams>("/v1/runs/:id", async (request) => service.getRun(request.tenant, request.params.id));
  // The caller's own signing secret, by its key's tenant: no tenant names another's here.
  app.get("/v1/webhook-secret", async (request, reply) => {
    const secret = await deps.webhookSecret?.(request.tenant);
    if (secret === undefined) throw new NotFoundError("webhook secret", NO_TENANT_SECRET);
    return reply.header("cache-control", "no-store").send({ secret });
  });
  // Rotates the caller's own secret only; a retry with its Idempotency-Key answers the first
  // rotation again and rotates nothing (idempotency-hooks.ts).
  app.post("/v1/webhook-secret/rotate", async (request, reply) => {
    parseBody(noFieldsBody, request.body);
    const rotated = await deps.rotateWebhookSecret?.(request.tenant);
    // Off by the operator's settings: a retry with its Idempotency-Key once they are on rotates.
    if (rotated === undefined)
      throw new NotFoundError("webhook secret", NO_TENANT_SECRET, { fleetState: true });
    return reply.send(rotated);
  });
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
