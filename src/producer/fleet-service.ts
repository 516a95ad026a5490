/**
 * What producers can do, independent of transport: the HTTP API and the CLI call this.
 * A run's input is stored on its run row and appended by the worker under its lease, so a
 * send never interleaves with a running session's appends and is never lost. Each action is
 * here; what it builds on is in its module: batch-actions.ts (the batch actions, which
 * FleetService hands on), batch-entries.ts (a batch's sessions checked), explicit-resume.ts
 * (the explicit resume, which FleetService hands on), agent-tool-checks.ts (the tools agents
 * list, checked), run-jobs.ts (the jobs of committed runs), cancel-cleanup.ts (what follows a
 * cancel), session-view.ts (a session as the API answers it).
 */
import { parseAgentConfig } from "../shared/agent-config.js";
import {
  type BatchCreated,
  SESSION_STATUSES,
  type SessionJson,
  type SessionStatus,
  type SessionSummary,
} from "../shared/api-types.js";
import type { SessionRow } from "../shared/db/schema.js";
import { AgentResumeError, NotFoundError, ValidationError } from "../shared/errors.js";
import { spentOutsideHistory } from "../shared/imported-spent.js";
import { assertAnsweredOnce, parseImportedHistoryInSlices } from "../shared/messages.js";
import { checkAgentModels, type ModelRouting } from "../shared/model-endpoints.js";
import { assertPricedForBudget, pricesOf, type UsageTotals } from "../shared/prices.js";
import type { ResumeKind, ResumePointJson } from "../shared/resume-point.js";
import type { BatchJson, BatchResult, BatchStore } from "../shared/store/batches.js";
import { type RunJson, runToJson } from "../shared/store/rows.js";
import type { ListStatus, RunLimits } from "../shared/store/session-queries.js";
import { parseBoundedImportInSlices } from "../shared/usage.js";
import { checkAgentTools } from "./agent-tool-checks.js";
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
import { BIG_BODY_BYTES } from "./big-bodies.js";
import { afterCancel, dropJobIfCancelled } from "./cancel-cleanup.js";
import { explicitResume, type ResumeHost } from "./explicit-resume.js";
import type { FleetServiceDeps } from "./fleet-service-deps.js";
import {
  createBody,
  encodeListCursor,
  importedCount,
  importPageBody,
  listQuery,
  parseBody,
  sendBody,
  sessionQuery,
  sessionStatus,
} from "./request-bodies.js";
import { MAX_HISTORY_BYTES, MAX_LIST_PAGE_BYTES } from "./request-limits.js";
import { enqueueCommitted, enqueueRun } from "./run-jobs.js";
import { sessionSummary, sessionView } from "./session-view.js";

export { type BatchCreated, SESSION_STATUSES, type SessionJson, type SessionStatus, type SessionSummary };

export class FleetService {
  /** What the batch actions (batch-actions.ts) use of this service. */
  private readonly batchHost: BatchActionsHost;
  /** What the explicit resume (explicit-resume.ts) uses of this service. */
  private readonly resumeHost: ResumeHost;

  constructor(private readonly deps: FleetServiceDeps) {
    this.batchHost = {
      deps,
      batches: () => this.batches,
      routing: () => this.routing,
      limits: () => this.limits,
      checkTools: (agents) => checkAgentTools(deps.toolNames, agents),
      resume: (tenant, id, body) => this.resume(tenant, id, body),
    };
    this.resumeHost = {
      deps,
      routing: () => this.routing,
      limits: () => this.limits,
      session: (tenant, id) => this.session(tenant, id),
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
    const spentOutside = spentOutsideHistory(input.spentOutsideHistory, messages);
    await checkAgentTools(this.deps.toolNames, [{ agent, field: "agent" }]);
    return this.deps.queries.createSession({
      agent,
      metadata: input.metadata,
      messages,
      tenant,
      sessionEvents: input.sessionEvents,
      ...(spentOutside ? { spentOutside } : {}),
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
      { ...this.limits, tenant, unpark: true, maxHistoryBytes: MAX_HISTORY_BYTES },
    );
    await enqueueCommitted(this.deps, [run.id], () =>
      enqueueRun(this.deps, tenant, { sessionId: id, runId: run.id }),
    );
    // A cancel that committed after the run and before its job could not remove the job.
    await dropJobIfCancelled(this.deps, tenant, { sessionId: id, runId: run.id, kind: "run" });
    return { runId: run.id };
  }

  /** The one explicit resume (explicit-resume.ts). */
  resume(tenant: string, id: string, body: unknown): Promise<{ runId: string; kind: ResumeKind }> {
    return explicitResume(this.resumeHost, tenant, id, body);
  }

  async resumePoint(tenant: string, id: string): Promise<ResumePointJson> {
    await this.session(tenant, id);
    return this.deps.queries.resumePoint(id, tenant);
  }

  /**
   * `query.afterSeq`: only the messages after that seq (a reader that has the ones before,
   * such as the console following a long session); `query.limit`: at most that many, with
   * `nextAfterSeq`; `query.runsLimit`/`runsBefore`: a page of runs, latest first, with
   * `nextRunsBefore`. The session's `usage` and `status` are still its whole. `whole`: awaited
   * before an unpaged read (no `limit`) is made, with the bytes of the messages it answers
   * (those after `afterSeq`; exact from BIG_BODY_BYTES on): the API's place for a big answer
   * (big-bodies.ts), which a poll of a big session's small tail does not take.
   */
  async getSession(
    tenant: string,
    id: string,
    query?: unknown,
    whole?: (historyBytes: number) => Promise<void>,
  ): Promise<SessionJson> {
    const parsed = parseBody(sessionQuery, query ?? {});
    const session = await this.session(tenant, id);
    if (parsed.limit === undefined && whole)
      await whole(await this.deps.queries.answerBytes(session, parsed.afterSeq ?? 0, BIG_BODY_BYTES));
    return sessionView(this.deps.queries, tenant, session, parsed);
  }

  /**
   * What `getSession` checks first (the query well formed, the session the tenant's), and the
   * bytes of the messages its unpaged answer holds (exact from BIG_BODY_BYTES on; 0 for a page,
   * which is never big): what a HEAD needs, without reading the messages.
   */
  async sessionAnswerBytes(tenant: string, id: string, query?: unknown): Promise<number> {
    const parsed = parseBody(sessionQuery, query ?? {});
    const session = await this.session(tenant, id);
    if (parsed.limit !== undefined) return 0;
    return this.deps.queries.answerBytes(session, parsed.afterSeq ?? 0, BIG_BODY_BYTES);
  }

  /** The bytes of the session's stored history, exact from BIG_BODY_BYTES on (a big-work place's measure). */
  async historyBytes(tenant: string, id: string): Promise<number> {
    return this.deps.queries.answerBytes(await this.session(tenant, id), 0, BIG_BODY_BYTES);
  }

  /**
   * A run, with its session's id; a queued run on a parked session (waiting-input.ts) also
   * says why it waits (`sessionParkedReason`): it starts only when someone acts.
   */
  async getRun(
    tenant: string,
    runId: string,
  ): Promise<RunJson & { sessionId: string; sessionParkedReason?: string }> {
    const run = await this.deps.queries.getRun(runId, tenant);
    if (!run) throw new NotFoundError(`run ${runId}`);
    const parked = run.status === "queued" ? await this.deps.queries.parkedReasonOf(run.sessionId) : null;
    return {
      ...runToJson(run),
      sessionId: run.sessionId,
      ...(parked === null ? {} : { sessionParkedReason: parked }),
    };
  }
}
