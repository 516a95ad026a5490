/**
 * What producers can do, independent of transport: the HTTP API and the CLI call this.
 * A run's input is stored on its run row and appended by the worker under its lease, so a
 * send never interleaves with a running session's appends and is never lost.
 */
import type { Queue } from "bullmq";
import { z } from "zod";
import { parseAgentConfig, parseModelConfig } from "../shared/agent-config.js";
import type { RunRow, SessionRow } from "../shared/db/schema.js";
import { RESUMABLE_TAIL_STATES } from "../shared/db/schema.js";
import { AgentResumeError, NotFoundError, ValidationError } from "../shared/errors.js";
import { parseHistory, type StoredMessage, toValidationError } from "../shared/messages.js";
import type { FleetMetrics } from "../shared/metrics.js";
import { enqueueRun, enqueueRuns } from "../shared/queues.js";
import {
  type ResumeKind,
  type ResumePointJson,
  resumePoint,
  toResumePointJson,
} from "../shared/resume-point.js";
import { type RunJson, runToJson } from "../shared/store/rows.js";
import type { SessionQueries } from "../shared/store/session-queries.js";

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

export class FleetService {
  constructor(
    private readonly deps: {
      queries: SessionQueries;
      queue: Queue;
      metrics: Pick<FleetMetrics, "resumeRefusals">;
    },
  ) {}

  async createSession(body: unknown): Promise<{ id: string }> {
    const input = parseBody(createBody, body);
    const agent = parseAgentConfig(input.agent, "agent");
    const messages = input.messages === undefined ? [] : parseHistory(input.messages, "messages");
    return this.deps.queries.createSession({ agent, metadata: input.metadata, messages });
  }

  /**
   * Creates a batch of sessions, each optionally with its first message, in one
   * transaction (all or none; every entry is validated first, errors name
   * `sessions[i]....`), then enqueues their runs in one round trip.
   */
  async createBatch(body: unknown): Promise<{ sessions: { id: string; runId: string | null }[] }> {
    const input = parseBody(batchBody, body);
    const items = input.sessions.map((item, i) => ({
      agent: parseAgentConfig(item.agent, `sessions[${i}].agent`),
      metadata: item.metadata,
      messages: item.messages === undefined ? [] : parseHistory(item.messages, `sessions[${i}].messages`),
      input: item.input,
    }));
    for (const [i, item] of items.entries()) {
      if (item.input === undefined) continue;
      const point = resumePoint(item.messages);
      if (!point.resumable && point.reason === "malformed") {
        throw new ValidationError(
          `sessions[${i}].messages`,
          "calls and results do not pair up; it cannot take new input",
        );
      }
    }
    const created = await this.deps.queries.createSessions(items);
    await enqueueRuns(
      this.deps.queue,
      created.flatMap(({ id, runId }) =>
        runId ? [{ name: "run" as const, payload: { sessionId: id, runId } }] : [],
      ),
    );
    return { sessions: created };
  }

  async listSessions(query: unknown): Promise<{ sessions: SessionSummary[] }> {
    const filter = parseBody(listQuery, query);
    const rows = await this.deps.queries.listSessions({
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

  private async session(id: string): Promise<SessionRow> {
    const session = await this.deps.queries.getSession(id);
    if (!session) throw new NotFoundError(`session ${id}`);
    return session;
  }

  async sendMessage(id: string, body: unknown): Promise<{ runId: string }> {
    const { content } = parseBody(sendBody, body);
    const session = await this.session(id);
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
    await enqueueRun(this.deps.queue, "run", { sessionId: id, runId: run.id });
    return { runId: run.id };
  }

  async resume(
    id: string,
    body: unknown,
    trigger: "api" | "cli" = "api",
  ): Promise<{ runId: string; kind: ResumeKind }> {
    const input = parseBody(resumeBody, body);
    const model = input?.model === undefined ? undefined : parseModelConfig(input.model, "model");
    const session = await this.session(id);
    const point = resumePoint(await this.deps.queries.loadHistory(id));
    if (!point.resumable) {
      this.deps.metrics.resumeRefusals.inc({ reason: point.reason });
      throw new AgentResumeError(point.reason, point.detail);
    }
    // An explicit resume of a parked session (e.g. attempts exhausted) makes it active again.
    if (session.status === "parked") await this.deps.queries.unpark(id);
    const { run } = await this.deps.queries.createRun({
      sessionId: id,
      kind: "resume",
      trigger,
      resumeKind: point.kind,
      model,
    });
    await enqueueRun(this.deps.queue, "resume", { sessionId: id, runId: run.id });
    return { runId: run.id, kind: point.kind };
  }

  async resumePoint(id: string): Promise<ResumePointJson> {
    await this.session(id);
    return toResumePointJson(resumePoint(await this.deps.queries.loadHistory(id)));
  }

  async getSession(id: string): Promise<SessionJson> {
    const session = await this.session(id);
    const [messages, runs] = await Promise.all([
      this.deps.queries.loadHistory(id),
      this.deps.queries.listRuns(id),
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

  async getRun(runId: string): Promise<RunJson & { sessionId: string }> {
    const run = await this.deps.queries.getRun(runId);
    if (!run) throw new NotFoundError(`run ${runId}`);
    return { ...runToJson(run), sessionId: run.sessionId };
  }
}
