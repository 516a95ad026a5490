/**
 * What producers can do, independent of transport: the HTTP API and the CLI call this.
 * A run's input is stored on its run row and appended by the worker under its lease, so a
 * send never interleaves with a running session's appends and is never lost.
 */
import { randomUUID } from "node:crypto";
import { isDeepStrictEqual } from "node:util";
import type { z } from "zod";
import { type AgentConfig, parseAgentConfig, parseModelConfig } from "../shared/agent-config.js";
import {
  type BatchCreated,
  SESSION_STATUSES,
  type SessionJson,
  type SessionStatus,
  type SessionSummary,
} from "../shared/api-types.js";
import type { RunRow, SessionRow } from "../shared/db/schema.js";
import { AgentResumeError, NotFoundError, ValidationError } from "../shared/errors.js";
import { assertAnsweredOnce, parseImportedHistory } from "../shared/messages.js";
import type { FleetMetrics } from "../shared/metrics.js";
import { checkAgentModels, type ModelRouting, resolveModelRoute } from "../shared/model-endpoints.js";
import { assertPricedForBudget, pricesOf, totalUsage, type UsageTotals } from "../shared/prices.js";
import { QUEUES, type RunQueues } from "../shared/queues.js";
import { type ResumeKind, type ResumePointJson, resumePoint } from "../shared/resume-point.js";
import type { RefusalReason } from "../shared/resume-reasons.js";
import type { BatchJson, BatchResult, BatchStore, DroppedRun } from "../shared/store/batches.js";
import { type RunJson, runToJson } from "../shared/store/rows.js";
import type {
  BatchTarget,
  ListCursor,
  ListStatus,
  RunLimits,
  SessionQueries,
} from "../shared/store/session-queries.js";
import type { FleetToolNames } from "../shared/tool-names.js";
import { checkWebhookUrl, type WebhookSettings, webhookSettingsFromEnv } from "../shared/webhooks.js";
import {
  type BatchResumePage,
  batchResumeBody,
  DEFAULT_BATCH_RESUME_LIMIT,
  resumeParkedPage,
} from "./batch-resume.js";
import type { Priorities } from "./fair-dispatch.js";
import {
  appendBody,
  batchBody,
  type batchItem,
  batchQuery,
  createBody,
  DEFAULT_SESSION_RUNS_PAGE,
  decodeListCursor,
  encodeListCursor,
  importedCount,
  importPageBody,
  listQuery,
  parseBody,
  resumeBody,
  sendBody,
  sessionQuery,
  sessionStatus,
} from "./request-bodies.js";
import { MAX_REQUEST_MESSAGES } from "./request-limits.js";

export { type BatchCreated, SESSION_STATUSES, type SessionJson, type SessionStatus, type SessionSummary };

/** Whether a waiting resume was asked for with the same model (none, or an equal one). */
function sameModel(a: unknown, b: unknown): boolean {
  return isDeepStrictEqual(a ?? null, b ?? null);
}

export class FleetService {
  constructor(
    private readonly deps: {
      queries: SessionQueries;
      queues: Pick<RunQueues, "enqueue" | "enqueueMany" | "getJob">;
      metrics: Pick<FleetMetrics, "resumeRefusals" | "runs">;
      /** The tool names workers registered (tool-names.ts). */
      toolNames: Pick<FleetToolNames, "known">;
      /**
       * Declared endpoints and allowed raw base URLs (contracts.md §11), from the same
       * configuration the workers load: a MODEL they would refuse is a 400 here.
       */
      models: Pick<ModelRouting, "endpoints" | "allowedBaseUrls">;
      /** Per-tenant limits checked where runs are queued (contracts §10). */
      limits?: RunLimits;
      /** Fair priorities for new runs (fair-dispatch.ts); none: first in, first out. */
      priorities?: Priorities;
      /**
       * Fair priorities for the resumes callers ask for (`POST …/resume`, a batch's resume),
       * so one tenant's many resumes do not starve another's; none: first in, first out.
       * Automatic resumes carry no priority and go ahead of them.
       */
      resumePriorities?: Priorities;
      /** Batches, their counts and results, and cancellation (contracts §9). */
      batches?: BatchStore;
      /** Tells workers to abort the runs of cancelled sessions (worker-signals.ts `cancelChannel`). */
      cancelSignal?: (sessionIds: string[]) => Promise<void>;
      /**
       * Forgets the waiting requests of handed-back runs a cancel ended (provider-limits.ts
       * `forget`): their tenant stops counting as waiting for the endpoint's permits at once.
       */
      waitsGone?: (tenant: string, runIds: string[]) => Promise<void>;
      /** Webhook URL checks (webhooks.ts). */
      webhooks?: WebhookSettings;
      /**
       * Writes the RUN_COMPLETED of runs a cancel ended while they were queued (contracts §7:
       * every run ends with exactly one). Absent: no events.
       */
      runEnded?: (sessionId: string, runId: string, outcome: "cancelled") => Promise<void>;
      /** Told when committed runs' jobs could not be added (Redis away); the sweeper adds them. */
      onEnqueueFailed?: (error: unknown, runIds: string[]) => void;
    },
  ) {}

  /**
   * Adds the jobs of runs already committed. The request has acted once its run is stored: a
   * job Redis did not take is added by the sweeper (orphaned queued runs) when Redis answers
   * again, so a failure here is logged, not answered with a 5xx — which would release the
   * request's Idempotency-Key, and the caller's retry would store its input a second time.
   */
  private async enqueueCommitted(runIds: string[], add: () => Promise<unknown>): Promise<void> {
    if (runIds.length === 0) return;
    try {
      await add();
    } catch (error) {
      this.deps.onEnqueueFailed?.(error, runIds);
    }
  }

  private get batches(): BatchStore {
    if (!this.deps.batches) throw new Error("this FleetService was built without a BatchStore");
    return this.deps.batches;
  }

  private get limits(): RunLimits {
    return this.deps.limits ?? {};
  }

  /** Routes are checked only for where they lead, never for keys: the API sends no model request. */
  private get routing(): ModelRouting {
    return { ...this.deps.models, apiKeys: {} };
  }

  /**
   * Refuses an agent that lists a tool no worker of the fleet registered, naming the first
   * such `…agent.tools[i]`: it could only fail later, on a worker (contracts.md §12). One
   * look-up for all the agents of a request.
   */
  private async checkTools(agents: { agent: AgentConfig; field: string }[]): Promise<void> {
    const known = await this.deps.toolNames.known(new Set(agents.flatMap(({ agent }) => agent.tools)));
    for (const { agent, field } of agents) {
      const i = agent.tools.findIndex((name) => !known.has(name));
      if (i >= 0) {
        throw new ValidationError(
          `${field}.tools[${i}]`,
          `no worker of this fleet has registered a tool named "${agent.tools[i]}"`,
        );
      }
    }
  }

  // Every action takes the caller's tenant (contracts §10): what it creates belongs to that
  // tenant, and another tenant's session or run is "not found", exactly like a missing one.

  async createSession(tenant: string, body: unknown): Promise<{ id: string }> {
    const input = parseBody(createBody, body);
    const agent = parseAgentConfig(input.agent, "agent");
    checkAgentModels(agent, this.routing, "agent");
    assertPricedForBudget(agent, pricesOf(this.routing), "agent");
    importedCount(input.messages, "messages");
    const messages = input.messages === undefined ? [] : parseImportedHistory(input.messages, "messages");
    assertAnsweredOnce(messages, "messages");
    await this.checkTools([{ agent, field: "agent" }]);
    return this.deps.queries.createSession({
      agent,
      metadata: input.metadata,
      messages,
      tenant,
      sessionEvents: input.sessionEvents,
    });
  }

  /**
   * Creates a batch of sessions, each optionally with its first message, in one
   * transaction (all or none; every entry is validated first, errors name
   * `sessions[i]....`), then enqueues their runs in one round trip.
   */
  async createBatch(tenant: string, body: unknown): Promise<BatchCreated> {
    const input = parseBody(batchBody, body);
    const webhookUrl =
      input.webhook === undefined
        ? null
        : checkWebhookUrl(input.webhook.url, this.deps.webhooks ?? webhookSettingsFromEnv({}), "webhook.url");
    const id = randomUUID();
    const sessions = await this.addBatchSessions(tenant, input.sessions, {
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
  async appendToBatch(tenant: string, batchId: string, body: unknown): Promise<BatchCreated> {
    const input = parseBody(appendBody, body);
    const sessions = await this.addBatchSessions(tenant, input.sessions, {
      id: batchId,
      tenant,
      create: false,
      open: input.close !== true,
    });
    return { id: batchId, sessions };
  }

  /** Validates a batch's sessions (errors name `sessions[i]…`), stores them all or none, queues their runs. */
  private async addBatchSessions(
    tenant: string,
    entries: z.infer<typeof batchItem>[],
    batch: BatchTarget,
  ): Promise<BatchCreated["sessions"]> {
    const seen = new Map<string, number>();
    for (const [i, item] of entries.entries()) {
      if (item.customId === undefined) continue;
      if (seen.has(item.customId))
        throw new ValidationError(
          `sessions[${i}].customId`,
          `repeats the customId of sessions[${seen.get(item.customId)}]; customIds are unique within a batch`,
        );
      seen.set(item.customId, i);
    }
    let imported = 0;
    for (const [i, item] of entries.entries())
      imported += importedCount(item.messages, `sessions[${i}].messages`);
    if (imported > MAX_REQUEST_MESSAGES)
      throw new ValidationError(
        "sessions",
        `import ${imported.toLocaleString("en")} messages in all; one request imports at most ${MAX_REQUEST_MESSAGES.toLocaleString("en")}`,
      );
    const items = entries.map((item, i) => ({
      agent: parseAgentConfig(item.agent, `sessions[${i}].agent`),
      metadata: item.metadata,
      messages:
        item.messages === undefined ? [] : parseImportedHistory(item.messages, `sessions[${i}].messages`),
      input: item.input,
      customId: item.customId,
      sessionEvents: item.sessionEvents,
      tenant,
    }));
    for (const [i, item] of items.entries()) {
      checkAgentModels(item.agent, this.routing, `sessions[${i}].agent`);
      assertPricedForBudget(item.agent, pricesOf(this.routing), `sessions[${i}].agent`);
      assertAnsweredOnce(item.messages, `sessions[${i}].messages`);
      if (item.input === undefined) continue;
      const point = resumePoint(item.messages);
      if (!point.resumable && point.reason === "malformed") {
        throw new ValidationError(
          `sessions[${i}].messages`,
          "calls and results do not pair up; it cannot take new input",
        );
      }
    }
    if (items.length > 0)
      await this.checkTools(items.map(({ agent }, i) => ({ agent, field: `sessions[${i}].agent` })));
    const created = await this.deps.queries.createSessions(items, this.limits, batch);
    const jobs = created.flatMap(({ id, runId }) =>
      runId ? [{ name: "run" as const, payload: { sessionId: id, runId } }] : [],
    );
    await this.enqueueCommitted(
      jobs.map((job) => job.payload.runId),
      async () => {
        const priorities = await this.deps.priorities?.assign(tenant, jobs.length);
        await this.deps.queues.enqueueMany(jobs.map((job, i) => ({ ...job, priority: priorities?.[i] })));
        if (priorities)
          await this.deps.priorities?.added?.(
            priorities,
            jobs.map((job) => QUEUES.runs.jobId(job.payload)),
          );
      },
    );
    return created.map((session, i) => ({ ...session, customId: items[i]!.customId ?? null }));
  }

  /** `query.include=usage` adds the sessions' usage and cost summed (one aggregate; off by default). */
  async getBatch(tenant: string, id: string, query?: unknown): Promise<BatchJson & { usage?: UsageTotals }> {
    const { include } = parseBody(batchQuery, query ?? {});
    const batch = await this.batches.view(id, tenant);
    if (!batch) throw new NotFoundError(`batch ${id}`);
    return include === "usage" ? { ...batch, usage: await this.batches.usage(id) } : batch;
  }

  /** Resumes one page of the batch's parked sessions (`POST /v1/batches/:id/resume`, batch-resume.ts). */
  async resumeBatch(tenant: string, id: string, body: unknown): Promise<BatchResumePage> {
    const input = parseBody(batchResumeBody, body) ?? { limit: DEFAULT_BATCH_RESUME_LIMIT };
    const after = input.cursor === undefined ? undefined : decodeListCursor(input.cursor);
    if (input.cursor !== undefined && after === undefined)
      throw new ValidationError("cursor", "is not a cursor this endpoint gave (`nextCursor`)");
    // The model is checked once, before any session is touched.
    if (input.model !== undefined)
      resolveModelRoute(parseModelConfig(input.model, "model"), this.routing, "model");
    await this.getBatch(tenant, id);
    const resumeBody = input.model === undefined ? undefined : { model: input.model };
    return resumeParkedPage(
      {
        parked: async (before, limit) =>
          (
            await this.deps.queries.listSessions({
              tenant,
              batchId: id,
              status: "parked",
              parkedReason: input.parkedReason,
              before,
              limit,
            })
          ).map((row) => ({ id: row.id, cursor: row.cursor })),
        resume: (sessionId) => this.resume(tenant, sessionId, resumeBody),
        encode: encodeListCursor,
      },
      after,
      input.limit,
    );
  }

  /**
   * The batch's results, one per session in session-id order, fetched a page at a time
   * (keyset paging): the caller writes each line before the next page is read.
   */
  async batchResults(tenant: string, id: string, pageSize = 500): Promise<AsyncIterable<BatchResult>> {
    await this.getBatch(tenant, id);
    const store = this.batches;
    return (async function* () {
      let after = "";
      for (;;) {
        const page = await store.resultsPage(id, after, pageSize);
        for (const { id: sessionId, ...result } of page) {
          after = sessionId;
          yield result;
        }
        if (page.length < pageSize) return;
      }
    })();
  }

  /**
   * Cancels every session of the batch that has not ended (contracts §9) and closes it; the
   * sessions that ended keep their state. 404 for another tenant's batch.
   */
  async cancelBatch(tenant: string, id: string): Promise<BatchJson> {
    await this.getBatch(tenant, id);
    await this.afterCancel(tenant, await this.batches.cancel(tenant, { batchId: id }));
    return this.getBatch(tenant, id);
  }

  /** Cancels one session: queued runs are dropped, a running one is aborted; never resumed automatically. */
  async cancelSession(
    tenant: string,
    id: string,
  ): Promise<{ id: string; status: SessionStatus; cancelled: boolean }> {
    await this.session(tenant, id);
    const result = await this.batches.cancel(tenant, { sessionId: id });
    await this.afterCancel(tenant, result);
    const session = await this.session(tenant, id);
    const runs = await this.deps.queries.listRuns(id, tenant);
    return { id, status: sessionStatus(session, runs), cancelled: result.sessionIds.length > 0 };
  }

  /** After the cancel committed: workers abort what runs, and the dropped runs' jobs go. */
  private async afterCancel(
    tenant: string,
    result: {
      sessionIds: string[];
      dropped: DroppedRun[];
    },
  ) {
    for (let i = 0; i < result.sessionIds.length; i += 1_000)
      await this.deps.cancelSignal?.(result.sessionIds.slice(i, i + 1_000)).catch(() => {});
    // Best effort: a request not forgotten stops counting by itself soon after its place comes.
    const waited = result.dropped.filter((run) => run.handedBack).map((run) => run.id);
    if (waited.length > 0) await this.deps.waitsGone?.(tenant, waited).catch(() => {});
    // Queued runs the cancel ended never reach a worker, which counts every run it ends: they
    // are counted here, once (the cancel's statement ended each of them once).
    for (const run of result.dropped)
      this.deps.metrics.runs.inc({ kind: run.kind === "resume" ? "resume" : "run", outcome: "cancelled" });
    // Best effort: a job left behind finds its run ended and does nothing.
    const dropped = [...result.dropped];
    const lane = async () => {
      for (let run = dropped.pop(); run; run = dropped.pop()) {
        const name = run.kind === "resume" ? "resume" : "run";
        const jobId = QUEUES.runs.jobId({ sessionId: run.sessionId, runId: run.id });
        const job = await this.deps.queues.getJob(name, jobId).catch(() => undefined);
        await job?.remove().catch(() => {});
        if (run.sessionEvents !== false)
          await this.deps.runEnded?.(run.sessionId, run.id, "cancelled").catch(() => {});
      }
    };
    const removed = Promise.all(Array.from({ length: 16 }, lane));
    // Fair dispatch: a tenant left with nothing waiting starts over (fair-dispatch.ts `forget`).
    // Best effort: the cancel has committed, and a failure here only leaves the order as it was.
    if (
      result.dropped.length > 0 &&
      !(await this.deps.queries.tenantHasQueuedRuns(tenant).catch(() => true))
    ) {
      await this.deps.priorities?.forget?.(tenant).catch(() => {});
      await this.deps.resumePriorities?.forget?.(tenant).catch(() => {});
    }
    // A big batch's jobs are removed after the answer (its runs have ended already).
    if (result.dropped.length <= 1_000) await removed;
  }

  async listSessions(
    tenant: string,
    query: unknown,
  ): Promise<{ sessions: SessionSummary[]; nextCursor: string | null }> {
    const filter = parseBody(listQuery, query);
    const rows = await this.deps.queries.listSessions({
      tenant,
      status: filter.status as ListStatus | undefined,
      batchId: filter.batch,
      parkedReason: filter.parkedReason,
      before: filter.before,
      limit: filter.limit,
    });
    const last = rows.length === filter.limit ? rows.at(-1) : undefined;
    return {
      nextCursor: last ? encodeListCursor(last.cursor) : null,
      sessions: rows.map((row) => ({
        id: row.id,
        batchId: row.batchId,
        customId: row.customId,
        status: sessionStatus(row, row.runState ? [{ status: row.runState }] : []),
        parked: row.status === "parked",
        tailState: row.tailState,
        parkedReason: row.parkedReason,
        metadata: row.metadata,
        updatedAt: row.updatedAt.toISOString(),
      })),
    };
  }

  private async session(tenant: string, id: string): Promise<SessionRow> {
    const session = await this.deps.queries.getSession(id, tenant);
    if (!session) throw new NotFoundError(`session ${id}`);
    return session;
  }

  /**
   * Continues a session's imported history with the next page (imported-pages.ts): validated
   * as an import is, stored whole or not at all, only right after `afterSeq`.
   */
  async importMessages(tenant: string, id: string, body: unknown): Promise<{ lastSeq: number }> {
    const input = parseBody(importPageBody, body);
    if (importedCount(input.messages, "messages") === 0)
      throw new ValidationError("messages", "must hold at least one message");
    const page = parseImportedHistory(input.messages, "messages");
    return this.deps.queries.appendImported(tenant, id, input.afterSeq, page);
  }

  async sendMessage(tenant: string, id: string, body: unknown): Promise<{ runId: string }> {
    const { content, goal } = parseBody(sendBody, body);
    const session = await this.session(tenant, id);
    if (session.tailState === "malformed")
      throw new AgentResumeError("malformed", "its tool calls and results do not pair up");
    // New input is someone acting on a parked or cancelled session: it becomes active again,
    // in the transaction that queues the run (a run refused by a limit leaves it as it was).
    const { run } = await this.deps.queries.createRun(
      { sessionId: id, kind: "run", trigger: "api", input: content, ...(goal ? { goal } : {}) },
      { ...this.limits, tenant, unpark: true },
    );
    await this.enqueueCommitted([run.id], async () => {
      const priorities = await this.deps.priorities?.assign(tenant, 1);
      const jobId = await this.deps.queues.enqueue(
        "run",
        { sessionId: id, runId: run.id },
        { priority: priorities?.[0] },
      );
      if (priorities) await this.deps.priorities?.added?.(priorities, [jobId]);
    });
    return { runId: run.id };
  }

  async resume(
    tenant: string,
    id: string,
    body: unknown,
    trigger: "api" | "cli" = "api",
  ): Promise<{ runId: string; kind: ResumeKind }> {
    const input = parseBody(resumeBody, body);
    const model = input?.model === undefined ? undefined : parseModelConfig(input.model, "model");
    if (model) resolveModelRoute(model, this.routing, "model");
    await this.session(tenant, id);
    const [history, runs] = await Promise.all([
      this.deps.queries.loadHistory(id),
      this.deps.queries.listRuns(id, tenant),
    ]);
    const active = runs.filter((r) => r.status !== "ended");
    const waiting = active.find((r) => r.kind === "resume" && r.status === "queued");
    // While a run is on its way there is nothing to resume yet (contracts §12); a request
    // that asks for exactly the resume already waiting joins it.
    if (active.length > 0 && !(active.length === 1 && waiting && sameModel(waiting.model, model)))
      throw this.refuse("running", "a run of this session is queued or running");
    const point = resumePoint(history);
    if (!point.resumable) throw this.refuse(point.reason, point.detail);
    // An explicit resume of a parked session (e.g. attempts exhausted) or a cancelled one
    // makes it active again.
    const { run, created } = await this.deps.queries.createRun(
      { sessionId: id, kind: "resume", trigger, resumeKind: point.kind, model },
      { ...this.limits, tenant, unpark: true },
    );
    if (!created && !sameModel(run.model, model))
      throw this.refuse("running", "another resume of this session is queued or running");
    await this.enqueueCommitted([run.id], () =>
      created
        ? this.enqueueResume(tenant, { sessionId: id, runId: run.id })
        : this.startNow(tenant, id, run.id),
    );
    return { runId: run.id, kind: point.kind };
  }

  private refuse(reason: RefusalReason, detail?: string): AgentResumeError {
    this.deps.metrics.resumeRefusals.inc({ reason });
    return new AgentResumeError(reason, detail);
  }

  /**
   * Someone asked for the resume that is already waiting: it need not wait any longer. One
   * that waits out its backoff starts now; one whose job Redis lost, or whose job ended
   * without starting it (the queue gave up on it, and the session was parked), gets its job
   * again now rather than at the sweeper's next look. Someone acting is not an automatic
   * resume: nothing is counted.
   */
  private async startNow(tenant: string, sessionId: string, runId: string): Promise<void> {
    const payload = { sessionId, runId };
    const job = await this.deps.queues.getJob("resume", QUEUES.resumes.jobId(payload));
    if (job && (await job.isDelayed())) {
      await job.promote().catch(() => {});
      return;
    }
    if (job && !(await job.isCompleted()) && !(await job.isFailed())) return;
    await job?.remove().catch(() => {});
    await this.enqueueResume(tenant, payload);
  }

  /** Queues a resume someone asked for, with its tenant's fair priority. */
  private async enqueueResume(tenant: string, payload: { sessionId: string; runId: string }): Promise<void> {
    const priorities = await this.deps.resumePriorities?.assign(tenant, 1);
    const jobId = await this.deps.queues.enqueue("resume", payload, { priority: priorities?.[0] });
    if (priorities) await this.deps.resumePriorities?.added?.(priorities, [jobId]);
  }

  async resumePoint(tenant: string, id: string): Promise<ResumePointJson> {
    await this.session(tenant, id);
    return this.deps.queries.resumePoint(id, tenant);
  }

  /**
   * `query.afterSeq`: only the messages after that seq (a reader that has the ones before,
   * such as the console following a long session); `query.limit`: at most that many, with
   * `nextAfterSeq`; `query.runsLimit`/`runsBefore`: a page of runs, latest first, with
   * `nextRunsBefore`. The session's `usage` and `status` are still its whole.
   */
  async getSession(tenant: string, id: string, query?: unknown): Promise<SessionJson> {
    const { afterSeq = 0, limit, runsLimit, runsBefore } = parseBody(sessionQuery, query ?? {});
    const session = await this.session(tenant, id);
    const { queries } = this.deps;
    const runPage =
      runsLimit === undefined && runsBefore === undefined
        ? undefined
        : { limit: runsLimit ?? DEFAULT_SESSION_RUNS_PAGE, before: runsBefore };
    const [loaded, runs, usages] = await Promise.all([
      // One more than asked: whether another page follows.
      queries.loadHistory(id, afterSeq, limit === undefined ? undefined : limit + 1),
      runPage ? this.runsPage(id, tenant, runPage) : queries.listRuns(id, tenant).then((all) => ({ all })),
      afterSeq > 0 || limit !== undefined ? queries.usageTotals(id) : null,
    ]);
    const messages = limit !== undefined && loaded.length > limit ? loaded.slice(0, limit) : loaded;
    const shown = "all" in runs ? runs.all : runs.page;
    return {
      id: session.id,
      status: sessionStatus(session, "all" in runs ? runs.all : runs.unfinished),
      tailState: session.tailState,
      parkedReason: session.parkedReason,
      agent: session.agent,
      metadata: session.metadata,
      messages,
      runs: shown.map(runToJson),
      usage: usages ?? totalUsage(messages.flatMap((m) => (m.role === "assistant" ? [m.usage] : []))),
      createdAt: session.createdAt.toISOString(),
      updatedAt: session.updatedAt.toISOString(),
      ...(session.sessionEvents ? {} : { sessionEvents: false as const }),
      ...(limit === undefined
        ? {}
        : { nextAfterSeq: loaded.length > limit ? (messages.at(-1)?.seq ?? null) : null }),
      ...("all" in runs ? {} : { nextRunsBefore: runs.next }),
    };
  }

  /** A page of a session's runs (latest first), the `nextRunsBefore` of the older ones, and its unfinished runs. */
  private async runsPage(
    id: string,
    tenant: string,
    page: { limit: number; before?: ListCursor },
  ): Promise<{ page: RunRow[]; next: string | null; unfinished: Pick<RunRow, "status">[] }> {
    const { queries } = this.deps;
    const [rows, unfinished] = await Promise.all([
      // One more than asked: whether older runs exist.
      page.limit === 0
        ? []
        : queries.listRunsPage(id, tenant, { limit: page.limit + 1, before: page.before }),
      queries.unfinishedRunStatuses(id),
    ]);
    const older = rows.length > page.limit;
    const shown = older ? rows.slice(1) : rows;
    return {
      page: shown,
      next: older && shown[0] ? encodeListCursor(shown[0].cursor) : null,
      unfinished: unfinished.map((status) => ({ status })),
    };
  }

  async getRun(tenant: string, runId: string): Promise<RunJson & { sessionId: string }> {
    const run = await this.deps.queries.getRun(runId, tenant);
    if (!run) throw new NotFoundError(`run ${runId}`);
    return { ...runToJson(run), sessionId: run.sessionId };
  }
}
