/**
 * What producers can do, independent of transport: the HTTP API and the CLI call this.
 * A run's input is stored on its run row and appended by the worker under its lease, so a
 * send never interleaves with a running session's appends and is never lost. Each action is
 * here; what it builds on is in its module: batch-actions.ts (the batch actions, which
 * FleetService hands on), batch-entries.ts (a batch's sessions checked), run-jobs.ts (the jobs
 * of committed runs), cancel-cleanup.ts (what follows a cancel), session-view.ts (a session as
 * the API answers it).
 */
import { isDeepStrictEqual } from "node:util";
import {
  type AgentConfig,
  assertToolsFit,
  parseAgentConfig,
  parseModelConfig,
} from "../shared/agent-config.js";
import {
  type BatchCreated,
  SESSION_STATUSES,
  type SessionJson,
  type SessionStatus,
  type SessionSummary,
} from "../shared/api-types.js";
import type { SessionRow } from "../shared/db/schema.js";
import { AgentResumeError, FleetStateError, NotFoundError, ValidationError } from "../shared/errors.js";
import { assertAnsweredOnce, parseImportedHistoryInSlices } from "../shared/messages.js";
import { checkAgentModels, type ModelRouting, resolveModelRoute } from "../shared/model-endpoints.js";
import { assertModelPriced, assertPricedForBudget, pricesOf, type UsageTotals } from "../shared/prices.js";
import type { ResumeKind, ResumePointJson } from "../shared/resume-point.js";
import type { RefusalReason } from "../shared/resume-reasons.js";
import type { BatchJson, BatchResult, BatchStore } from "../shared/store/batches.js";
import { type RunJson, runToJson } from "../shared/store/rows.js";
import type { ListStatus, RunLimits } from "../shared/store/session-queries.js";
import { parseBoundedImportInSlices } from "../shared/usage.js";
import {
  appendToBatch,
  type BatchActionsHost,
  batchResults,
  cancelBatch,
  createBatch,
  getBatch,
  resumeBatch,
} from "./batch-actions.js";
import type { BatchResumePage } from "./batch-resume.js";
import { afterCancel, dropJobIfCancelled } from "./cancel-cleanup.js";
import type { FleetServiceDeps } from "./fleet-service-deps.js";
import {
  createBody,
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
import { MAX_HISTORY_BYTES, MAX_LIST_PAGE_BYTES } from "./request-limits.js";
import { enqueueCommitted, enqueueResume, enqueueRun, startNow } from "./run-jobs.js";
import { sessionSummary, sessionView } from "./session-view.js";

export { type BatchCreated, SESSION_STATUSES, type SessionJson, type SessionStatus, type SessionSummary };

/** Whether a waiting resume was asked for with the same model (none, or an equal one). */
function sameModel(a: unknown, b: unknown): boolean {
  return isDeepStrictEqual(a ?? null, b ?? null);
}

export class FleetService {
  /** What the batch actions (batch-actions.ts) use of this service. */
  private readonly batchHost: BatchActionsHost;

  constructor(private readonly deps: FleetServiceDeps) {
    this.batchHost = {
      deps,
      batches: () => this.batches,
      routing: () => this.routing,
      limits: () => this.limits,
      checkTools: (agents) => this.checkTools(agents),
      resume: (tenant, id, body) => this.resume(tenant, id, body),
    };
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
   * Refuses an agent that lists a tool twice or a tool no worker of the fleet registered, naming
   * the first such `…agent.tools[i]`: it could only fail later, on a worker (contracts.md §12). One
   * look-up for all the agents of a request.
   */
  private async checkTools(agents: { agent: AgentConfig; field: string }[]): Promise<void> {
    // A name listed twice would be sent to the model twice: providers refuse such a request
    // (Anthropic: "Tool names must be unique"), so the session could only fail at its first run.
    for (const { agent, field } of agents) {
      const first = new Map<string, number>();
      for (const [i, name] of agent.tools.entries()) {
        const at = first.get(name);
        if (at !== undefined)
          throw new ValidationError(
            `${field}.tools[${i}]`,
            `lists "${name}" again (as ${field}.tools[${at}]); each tool is listed once`,
          );
        first.set(name, i);
      }
    }
    const known = await this.deps.toolNames.known(new Set(agents.flatMap(({ agent }) => agent.tools)));
    for (const { agent, field } of agents) {
      const i = agent.tools.findIndex((name) => !known.has(name));
      if (i >= 0) {
        throw new FleetStateError(
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
    const messages =
      input.messages === undefined ? [] : await parseBoundedImportInSlices(input.messages, "messages");
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

  /** A batch of sessions created, their runs queued (batch-actions.ts). */
  createBatch(tenant: string, body: unknown): Promise<BatchCreated> {
    return createBatch(this.batchHost, tenant, body);
  }

  /** Sessions added to an open batch of the caller, `close: true` closing it (batch-actions.ts). */
  appendToBatch(tenant: string, batchId: string, body: unknown): Promise<BatchCreated> {
    return appendToBatch(this.batchHost, tenant, batchId, body);
  }

  /** The batch; `query.include=usage` adds its sessions' usage and cost (batch-actions.ts). */
  getBatch(tenant: string, id: string, query?: unknown): Promise<BatchJson & { usage?: UsageTotals }> {
    return getBatch(this.batchHost, tenant, id, query);
  }

  /** Resumes one page of the batch's parked sessions (batch-actions.ts). */
  resumeBatch(tenant: string, id: string, body: unknown): Promise<BatchResumePage> {
    return resumeBatch(this.batchHost, tenant, id, body);
  }

  /** The batch's results, one per session, read a page at a time (batch-actions.ts). */
  batchResults(
    tenant: string,
    id: string,
    pageSize?: number,
    maxPageBytes?: number,
    query?: unknown,
  ): Promise<AsyncIterable<BatchResult>> {
    return batchResults(this.batchHost, tenant, id, pageSize, maxPageBytes, query);
  }

  /** Cancels the batch's sessions that have not ended and closes it (batch-actions.ts). */
  cancelBatch(tenant: string, id: string): Promise<BatchJson> {
    return cancelBatch(this.batchHost, tenant, id);
  }

  /** Cancels one session: queued runs are dropped, a running one is aborted; never resumed automatically. */
  async cancelSession(
    tenant: string,
    id: string,
  ): Promise<{ id: string; status: SessionStatus; cancelled: boolean }> {
    await this.session(tenant, id);
    const result = await this.batches.cancel(tenant, { sessionId: id });
    await afterCancel(this.deps, tenant, result);
    // Said without reading again: a read failing here answered a committed cancel 5xx (its
    // Idempotency-Key released; the retry answered `cancelled: false`).
    if (result.sessionIds.length > 0) return { id, status: "cancelled", cancelled: true };
    const session = await this.session(tenant, id);
    // Its status needs only the runs not ended (a session used for days has thousands).
    const runs = await this.deps.queries.unfinishedRuns(id, tenant);
    return { id, status: sessionStatus(session, runs), cancelled: false };
  }

  async listSessions(
    tenant: string,
    query: unknown,
  ): Promise<{ sessions: SessionSummary[]; nextCursor: string | null }> {
    const filter = parseBody(listQuery, query);
    const { rows, cut } = await this.deps.queries.listSessionPage({
      tenant,
      status: filter.status as ListStatus | undefined,
      batchId: filter.batch,
      parkedReason: filter.parkedReason,
      before: filter.before,
      limit: filter.limit,
      maxBytes: MAX_LIST_PAGE_BYTES,
    });
    // A page stopped by its size has a next page as a full one may: fewer than `limit` with a
    // `nextCursor` is not the end.
    const last = rows.length === filter.limit || cut ? rows.at(-1) : undefined;
    return {
      nextCursor: last ? encodeListCursor(last.cursor) : null,
      sessions: rows.map(sessionSummary),
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
    const page = await parseImportedHistoryInSlices(input.messages, "messages");
    return this.deps.queries.appendImported(tenant, id, input.afterSeq, page, MAX_HISTORY_BYTES);
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
    await enqueueCommitted(this.deps, [run.id], () =>
      enqueueRun(this.deps, tenant, { sessionId: id, runId: run.id }),
    );
    // A cancel that committed after the run and before its job could not remove the job.
    await dropJobIfCancelled(this.deps, tenant, { sessionId: id, runId: run.id, kind: "run" });
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
    const session = await this.session(tenant, id);
    // The model runs in the agent's place: a cost budget needs its price, as at creation.
    if (model) assertToolsFit(model, session.agent, "model");
    if (model && session.agent.budget?.maxCostUsd !== undefined)
      assertModelPriced(model, pricesOf(this.routing), "model", "the session's agent.budget.maxCostUsd");
    // The history's shape and the runs not ended only: a session used for days has a history
    // of many MB and thousands of runs, none of it needed here.
    const [{ point, lastSeq }, active] = await Promise.all([
      this.deps.queries.historyPoint(id),
      this.deps.queries.unfinishedRuns(id, tenant),
    ]);
    const waiting = active.find((r) => r.kind === "resume" && r.status === "queued");
    // While a run is on its way there is nothing to resume yet (contracts §12); a request
    // that asks for exactly the resume already waiting joins it.
    if (active.length > 0 && !(active.length === 1 && waiting && sameModel(waiting.model, model)))
      throw this.refuse("running", "a run of this session is queued or running");
    if (!point.resumable) throw this.refuse(point.reason, point.detail);
    // An explicit resume of a parked session (e.g. attempts exhausted) or a cancelled one
    // makes it active again.
    // What changed since the history and runs were read is seen under the session's lock.
    const { run, created } = await this.deps.queries
      .createRun(
        { sessionId: id, kind: "resume", trigger, resumeKind: point.kind, model },
        { ...this.limits, tenant, unpark: true, explicitResume: { lastSeq } },
      )
      .catch((error: unknown) => {
        if (error instanceof AgentResumeError) this.deps.metrics.resumeRefusals.inc({ reason: error.reason });
        throw error;
      });
    if (!created && !sameModel(run.model, model))
      throw this.refuse("running", "another resume of this session is queued or running");
    await enqueueCommitted(this.deps, [run.id], () =>
      created
        ? enqueueResume(this.deps, tenant, { sessionId: id, runId: run.id })
        : startNow(this.deps, tenant, id, run.id),
    );
    await dropJobIfCancelled(this.deps, tenant, { sessionId: id, runId: run.id, kind: "resume" });
    return { runId: run.id, kind: point.kind };
  }

  private refuse(reason: RefusalReason, detail?: string): AgentResumeError {
    this.deps.metrics.resumeRefusals.inc({ reason });
    return new AgentResumeError(reason, detail);
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
    const parsed = parseBody(sessionQuery, query ?? {});
    return sessionView(this.deps.queries, tenant, await this.session(tenant, id), parsed);
  }

  async getRun(tenant: string, runId: string): Promise<RunJson & { sessionId: string }> {
    const run = await this.deps.queries.getRun(runId, tenant);
    if (!run) throw new NotFoundError(`run ${runId}`);
    return { ...runToJson(run), sessionId: run.sessionId };
  }
}
