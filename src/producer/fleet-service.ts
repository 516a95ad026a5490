/**
 * What producers can do, independent of transport: the HTTP API and the CLI call this.
 * A run's input is stored on its run row and appended by the worker under its lease, so a
 * send never interleaves with a running session's appends and is never lost.
 */
import { isDeepStrictEqual } from "node:util";
import { z } from "zod";
import { type AgentConfig, parseAgentConfig, parseModelConfig } from "../shared/agent-config.js";
import type { RunRow, SessionRow } from "../shared/db/schema.js";
import { RESUMABLE_TAIL_STATES } from "../shared/db/schema.js";
import { AgentResumeError, NotFoundError, ValidationError } from "../shared/errors.js";
import {
  assertAnsweredOnce,
  parseHistory,
  type StoredMessage,
  toValidationError,
} from "../shared/messages.js";
import type { FleetMetrics } from "../shared/metrics.js";
import { checkAgentModels, type ModelRouting, resolveModelRoute } from "../shared/model-endpoints.js";
import { QUEUES, type RunQueues } from "../shared/queues.js";
import {
  type ResumeKind,
  type ResumePointJson,
  resumePoint,
  toResumePointJson,
} from "../shared/resume-point.js";
import type { RefusalReason } from "../shared/resume-reasons.js";
import { type RunJson, runToJson } from "../shared/store/rows.js";
import type { SessionQueries } from "../shared/store/session-queries.js";
import type { FleetToolNames } from "../shared/tool-names.js";

const createBody = z.strictObject({
  agent: z.unknown(),
  metadata: z.record(z.string(), z.unknown()).optional(),
  messages: z.unknown().optional(),
});
/** Sessions one batch may create. */
export const MAX_BATCH = 1_000;
const batchBody = z.strictObject({
  sessions: z
    .array(
      z.strictObject({
        agent: z.unknown(),
        metadata: z.record(z.string(), z.unknown()).optional(),
        messages: z.unknown().optional(),
        input: z.string().min(1, "must be a non-empty string").max(1_000_000).optional(),
      }),
    )
    .min(1, "must hold at least one session")
    .max(MAX_BATCH, `holds at most ${MAX_BATCH} sessions`),
});
const listQuery = z.strictObject({
  status: z.enum(["parked", "active"]).optional(),
  limit: z.coerce.number().int().min(1).max(1_000).default(100),
});
const sendBody = z.strictObject({ content: z.string().min(1, "must be a non-empty string").max(1_000_000) });
const resumeBody = z.strictObject({ model: z.unknown().optional() }).optional();

function parseBody<T>(schema: z.ZodType<T>, body: unknown): T {
  const result = schema.safeParse(body ?? undefined);
  if (!result.success) throw toValidationError("", result.error);
  return result.data;
}

export type SessionSummary = {
  id: string;
  parked: boolean;
  tailState: string;
  parkedReason: string | null;
  metadata: Record<string, unknown>;
  updatedAt: string;
};

export type SessionJson = {
  id: string;
  status: string;
  tailState: string;
  parkedReason: string | null;
  agent: unknown;
  metadata: Record<string, unknown>;
  messages: StoredMessage[];
  runs: RunJson[];
  createdAt: string;
  updatedAt: string;
};

/** One word for a session: parked, running, queued, completed, interrupted, stopped, empty. */
export function sessionStatus(
  session: Pick<SessionRow, "status" | "tailState">,
  runs: Pick<RunRow, "status">[],
): string {
  if (session.status === "parked") return "parked";
  if (runs.some((r) => r.status === "running")) return "running";
  if (runs.some((r) => r.status === "queued")) return "queued";
  if (session.tailState === "completed") return "completed";
  if (session.tailState === "empty") return "empty";
  if ((RESUMABLE_TAIL_STATES as readonly string[]).includes(session.tailState)) return "interrupted";
  return "stopped";
}

/** Whether a waiting resume was asked for with the same model (none, or an equal one). */
function sameModel(a: unknown, b: unknown): boolean {
  return isDeepStrictEqual(a ?? null, b ?? null);
}

export class FleetService {
  constructor(
    private readonly deps: {
      queries: SessionQueries;
      queues: Pick<RunQueues, "enqueue" | "enqueueMany" | "getJob">;
      metrics: Pick<FleetMetrics, "resumeRefusals">;
      /** The tool names workers registered (tool-names.ts). */
      toolNames: Pick<FleetToolNames, "known">;
      /**
       * Declared endpoints and allowed raw base URLs (contracts.md §11), from the same
       * configuration the workers load: a MODEL they would refuse is a 400 here.
       */
      models: Pick<ModelRouting, "endpoints" | "allowedBaseUrls">;
    },
  ) {}

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
    const known = await this.deps.toolNames.known(agents.flatMap(({ agent }) => agent.tools));
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
    const messages = input.messages === undefined ? [] : parseHistory(input.messages, "messages");
    assertAnsweredOnce(messages, "messages");
    await this.checkTools([{ agent, field: "agent" }]);
    return this.deps.queries.createSession({ agent, metadata: input.metadata, messages, tenant });
  }

  /**
   * Creates a batch of sessions, each optionally with its first message, in one
   * transaction (all or none; every entry is validated first, errors name
   * `sessions[i]....`), then enqueues their runs in one round trip.
   */
  async createBatch(
    tenant: string,
    body: unknown,
  ): Promise<{ sessions: { id: string; runId: string | null }[] }> {
    const input = parseBody(batchBody, body);
    const items = input.sessions.map((item, i) => ({
      agent: parseAgentConfig(item.agent, `sessions[${i}].agent`),
      metadata: item.metadata,
      messages: item.messages === undefined ? [] : parseHistory(item.messages, `sessions[${i}].messages`),
      input: item.input,
      tenant,
    }));
    for (const [i, item] of items.entries()) {
      checkAgentModels(item.agent, this.routing, `sessions[${i}].agent`);
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
    await this.checkTools(items.map(({ agent }, i) => ({ agent, field: `sessions[${i}].agent` })));
    const created = await this.deps.queries.createSessions(items);
    await this.deps.queues.enqueueMany(
      created.flatMap(({ id, runId }) =>
        runId ? [{ name: "run" as const, payload: { sessionId: id, runId } }] : [],
      ),
    );
    return { sessions: created };
  }

  async listSessions(tenant: string, query: unknown): Promise<{ sessions: SessionSummary[] }> {
    const filter = parseBody(listQuery, query);
    const rows = await this.deps.queries.listSessions({
      tenant,
      parked: filter.status === undefined ? undefined : filter.status === "parked",
      limit: filter.limit,
    });
    return {
      sessions: rows.map((row) => ({
        id: row.id,
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

  async sendMessage(tenant: string, id: string, body: unknown): Promise<{ runId: string }> {
    const { content } = parseBody(sendBody, body);
    const session = await this.session(tenant, id);
    if (session.tailState === "malformed")
      throw new AgentResumeError("malformed", "its tool calls and results do not pair up");
    // New input is someone acting on a parked session: it becomes active again.
    if (session.status === "parked") await this.deps.queries.unpark(id);
    const { run } = await this.deps.queries.createRun({
      sessionId: id,
      kind: "run",
      trigger: "api",
      input: content,
    });
    await this.deps.queues.enqueue("run", { sessionId: id, runId: run.id });
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
    // An explicit resume of a parked session (e.g. attempts exhausted) makes it active again.
    if (session.status === "parked") await this.deps.queries.unpark(id);
    const { run, created } = await this.deps.queries.createRun({
      sessionId: id,
      kind: "resume",
      trigger,
      resumeKind: point.kind,
      model,
    });
    if (!created && !sameModel(run.model, model))
      throw this.refuse("running", "another resume of this session is queued or running");
    if (created) await this.deps.queues.enqueue("resume", { sessionId: id, runId: run.id });
    else await this.startNow(id, run.id);
    return { runId: run.id, kind: point.kind };
  }

  private refuse(reason: RefusalReason, detail?: string): AgentResumeError {
    this.deps.metrics.resumeRefusals.inc({ reason });
    return new AgentResumeError(reason, detail);
  }

  /** Someone asked for the resume that waits out its backoff: it need not wait any longer. */
  private async startNow(sessionId: string, runId: string): Promise<void> {
    const job = await this.deps.queues.getJob("resume", QUEUES.resumes.jobId({ sessionId, runId }));
    if (job && (await job.isDelayed())) await job.promote().catch(() => {});
  }

  async resumePoint(tenant: string, id: string): Promise<ResumePointJson> {
    await this.session(tenant, id);
    const [history, runs] = await Promise.all([
      this.deps.queries.loadHistory(id),
      this.deps.queries.listRuns(id, tenant),
    ]);
    if (runs.some((r) => r.status !== "ended")) return { resumable: false, reason: "running" };
    return toResumePointJson(resumePoint(history));
  }

  async getSession(tenant: string, id: string): Promise<SessionJson> {
    const session = await this.session(tenant, id);
    const [messages, runs] = await Promise.all([
      this.deps.queries.loadHistory(id),
      this.deps.queries.listRuns(id, tenant),
    ]);
    return {
      id: session.id,
      status: sessionStatus(session, runs),
      tailState: session.tailState,
      parkedReason: session.parkedReason,
      agent: session.agent,
      metadata: session.metadata,
      messages,
      runs: runs.map(runToJson),
      createdAt: session.createdAt.toISOString(),
      updatedAt: session.updatedAt.toISOString(),
    };
  }

  async getRun(tenant: string, runId: string): Promise<RunJson & { sessionId: string }> {
    const run = await this.deps.queries.getRun(runId, tenant);
    if (!run) throw new NotFoundError(`run ${runId}`);
    return { ...runToJson(run), sessionId: run.sessionId };
  }
}
