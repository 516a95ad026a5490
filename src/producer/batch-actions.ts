/**
 * FleetService's batch actions (fleet-service.ts): a batch created and added to, read, its
 * parked sessions resumed a page at a time, its results read a page at a time, the batch
 * cancelled. Each takes the caller's tenant, as every action does.
 */
import { randomUUID } from "node:crypto";
import type { z } from "zod";
import { type AgentConfig, parseModelConfig } from "../shared/agent-config.js";
import type { BatchCreated } from "../shared/api-types.js";
import { ConflictError, NotFoundError, ValidationError } from "../shared/errors.js";
import { type ModelRouting, resolveModelRoute } from "../shared/model-endpoints.js";
import type { UsageTotals } from "../shared/prices.js";
import type { ResumeKind } from "../shared/resume-point.js";
import type { BatchJson, BatchResult, BatchStore } from "../shared/store/batches.js";
import type { BatchTarget, RunLimits } from "../shared/store/session-queries.js";
import { checkWebhookUrl, webhookSettingsFromEnv } from "../shared/webhooks.js";
import { parseBatchEntries } from "./batch-entries.js";
import {
  type BatchResumePage,
  batchResumeBody,
  DEFAULT_BATCH_RESUME_LIMIT,
  resumeParkedPage,
} from "./batch-resume.js";
import { afterCancel, dropJobsOfCancelled } from "./cancel-cleanup.js";
import type { FleetServiceDeps } from "./fleet-service-deps.js";
import {
  appendBody,
  batchBody,
  type batchItem,
  batchQuery,
  batchResultsQuery,
  decodeListCursor,
  encodeListCursor,
  parseBody,
} from "./request-bodies.js";
import { MAX_RESULTS_PAGE_BYTES } from "./request-limits.js";
import { enqueueCommitted, enqueueRuns } from "./run-jobs.js";

/** What the batch actions use of their FleetService (its private parts, read at each use). */
export type BatchActionsHost = {
  readonly deps: FleetServiceDeps;
  /** Its BatchStore; throws when it was built without one. */
  batches(): BatchStore;
  routing(): ModelRouting;
  limits(): RunLimits;
  checkTools(agents: { agent: AgentConfig; field: string }[]): Promise<void>;
  /** The one explicit resume (FleetService.resume), for each parked session of a page. */
  resume(tenant: string, id: string, body: unknown): Promise<{ runId: string; kind: ResumeKind }>;
};

/**
 * Creates a batch of sessions, each optionally with its first message, in one
 * transaction (all or none; every entry is validated first, errors name
 * `sessions[i]....`), then enqueues their runs in one round trip.
 */
export async function createBatch(
  host: BatchActionsHost,
  tenant: string,
  body: unknown,
): Promise<BatchCreated> {
  const input = parseBody(batchBody, body);
  const webhookUrl =
    input.webhook === undefined
      ? null
      : checkWebhookUrl(input.webhook.url, host.deps.webhooks ?? webhookSettingsFromEnv({}), "webhook.url");
  const id = randomUUID();
  const sessions = await addBatchSessions(host, tenant, input.sessions, {
    id,
    tenant,
    create: true,
    webhookUrl,
    open: input.open === true,
    sessionEvents: input.sessionEvents,
  });
  return { id, sessions, ...(webhookUrl === null ? {} : { webhook: { url: webhookUrl } }) };
}

/**
 * Adds sessions to an open batch of the caller (`POST /v1/batches/:id/sessions`); with
 * `close: true` the batch takes no more and may end. 409 `batch_closed` once closed.
 */
export async function appendToBatch(
  host: BatchActionsHost,
  tenant: string,
  batchId: string,
  body: unknown,
): Promise<BatchCreated> {
  const input = parseBody(appendBody, body);
  const sessions = await addBatchSessions(host, tenant, input.sessions, {
    id: batchId,
    tenant,
    create: false,
    open: input.close !== true,
  });
  return { id: batchId, sessions };
}

/** Validates a batch's sessions (errors name `sessions[i]…`), stores them all or none, queues their runs. */
async function addBatchSessions(
  host: BatchActionsHost,
  tenant: string,
  entries: z.infer<typeof batchItem>[],
  batch: BatchTarget,
): Promise<BatchCreated["sessions"]> {
  const items = await parseBatchEntries(tenant, entries, host.routing());
  if (items.length > 0)
    await host.checkTools(items.map(({ agent }, i) => ({ agent, field: `sessions[${i}].agent` })));
  const created = await host.deps.queries.createSessions(items, host.limits(), batch);
  const jobs = created.flatMap(({ id, runId }) =>
    runId ? [{ name: "run" as const, payload: { sessionId: id, runId } }] : [],
  );
  await enqueueCommitted(
    host.deps,
    jobs.map((job) => job.payload.runId),
    () => enqueueRuns(host.deps, tenant, jobs),
  );
  // A cancel of the batch that committed while the jobs were being added could not remove them.
  await dropJobsOfCancelled(
    host.deps,
    tenant,
    batch.id,
    jobs.map((job) => job.payload),
  );
  return created.map((session, i) => ({ ...session, customId: items[i]!.customId ?? null }));
}

/** `query.include=usage` adds the sessions' usage and cost summed (one aggregate; off by default). */
export async function getBatch(
  host: BatchActionsHost,
  tenant: string,
  id: string,
  query?: unknown,
): Promise<BatchJson & { usage?: UsageTotals }> {
  const { include } = parseBody(batchQuery, query ?? {});
  const batch = await host.batches().view(id, tenant);
  if (!batch) throw new NotFoundError(`batch ${id}`);
  return include === "usage" ? { ...batch, usage: await host.batches().usage(id) } : batch;
}

/**
 * Resumes one page of the batch's parked sessions (`POST /v1/batches/:id/resume`,
 * batch-resume.ts). The first page of a pass over a cancelled batch with nothing parked is a
 * 409 `batch_cancelled` that says why and what re-opens a cancelled session.
 */
export async function resumeBatch(
  host: BatchActionsHost,
  tenant: string,
  id: string,
  body: unknown,
): Promise<BatchResumePage> {
  const input = parseBody(batchResumeBody, body) ?? { limit: DEFAULT_BATCH_RESUME_LIMIT };
  const after = input.cursor === undefined ? undefined : decodeListCursor(input.cursor);
  if (input.cursor !== undefined && after === undefined)
    throw new ValidationError("cursor", "is not a cursor this endpoint gave (`nextCursor`)");
  // The model is checked once, before any session is touched.
  if (input.model !== undefined)
    resolveModelRoute(parseModelConfig(input.model, "model"), host.routing(), "model");
  const batch = await getBatch(host, tenant, id);
  const resumeBody = input.model === undefined ? undefined : { model: input.model };
  return resumeParkedPage(
    {
      parked: async (before, limit) => {
        const rows = await host.deps.queries.listSessions({
          tenant,
          batchId: id,
          status: "parked",
          parkedReason: input.parkedReason,
          before,
          limit,
        });
        // A cancelled batch's sessions are cancelled, not parked: a pass of its parked ones
        // found none and answered an empty page, which read as "resumed, all done".
        if (rows.length === 0 && before === undefined && batch.cancelledAt)
          throw new ConflictError(
            "batch_cancelled",
            `batch ${id} was cancelled and has no session parked${input.parkedReason === undefined ? "" : " for that reason"}: ` +
              "a batch resume resumes parked sessions only. A cancelled session is re-opened by a new message " +
              "(POST /v1/sessions/:id/messages) or, if its run had started, by POST /v1/sessions/:id/resume; " +
              "to run the batch's cancelled sessions again, submit them as a new batch",
          );
        return rows.map((row) => ({ id: row.id, cursor: row.cursor }));
      },
      resume: (sessionId) => host.resume(tenant, sessionId, resumeBody),
      encode: encodeListCursor,
    },
    after,
    input.limit,
  );
}

/**
 * The batch's results, one per session in session-id order, fetched a page at a time
 * (keyset paging): the caller writes each line before the next page is read. A batch deleted
 * meanwhile (marked, its sessions then purged) ends the read with a 404 at the next page: its
 * later pages are empty, and an empty page reads as the end, so the reader held part of the
 * batch for all of it. After the last page, whose emptiness is an end only if the batch was
 * not marked before it was read (sessions go only after the mark).
 */
export async function batchResults(
  host: BatchActionsHost,
  tenant: string,
  id: string,
  pageSize = 500,
  maxPageBytes = MAX_RESULTS_PAGE_BYTES,
  query?: unknown,
): Promise<AsyncIterable<BatchResult>> {
  // `after`: only the sessions after that one in session-id order (where a broken read stopped).
  const { after: start } = parseBody(batchResultsQuery, query ?? {});
  await getBatch(host, tenant, id);
  const store = host.batches();
  return (async function* () {
    let after = start ?? "";
    for (;;) {
      const page = await store.resultsPage(id, after, pageSize, maxPageBytes);
      if (!(await store.present(id))) throw new NotFoundError(`batch ${id}`);
      for (const { id: sessionId, ...result } of page) {
        after = sessionId;
        yield result;
      }
      // A page its outputs' size stopped is shorter and not the last: the end is an empty one.
      if (page.length === 0) return;
    }
  })();
}

/**
 * Cancels every session of the batch that has not ended (contracts §9) and closes it; the
 * sessions that ended keep their state. 404 for another tenant's batch.
 */
export async function cancelBatch(host: BatchActionsHost, tenant: string, id: string): Promise<BatchJson> {
  await getBatch(host, tenant, id);
  await afterCancel(host.deps, tenant, await host.batches().cancel(tenant, { batchId: id }));
  return getBatch(host, tenant, id);
}
