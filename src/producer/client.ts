/**
 * The TypeScript client of the HTTP API, exported by the package:
 *
 *   const fleet = new FleetClient({ baseUrl: "http://127.0.0.1:3000", apiKey: process.env.FLEET_API_KEY });
 *   const { id } = await fleet.createSession({ agent });
 *   const { runId } = await fleet.send(id, "Write notes.txt");
 *   const run = await fleet.waitForRun(runId);
 */
import type { AgentConfigInput, ModelConfig } from "../shared/agent-config.js";
import type { Message } from "../shared/messages.js";
import type { ResumeKind, ResumePointJson } from "../shared/resume-point.js";
import type { RunJson } from "../shared/store/rows.js";
import type { SessionJson, SessionSummary } from "./fleet-service.js";

/** An answer of the API other than 2xx; `reason` is set on 409 (nothing to resume). */
export class FleetApiError extends Error {
  override name = "FleetApiError";
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly reason?: string,
    readonly field?: string,
  ) {
    super(message);
  }
}

export type RunWithSession = RunJson & { sessionId: string };

export class FleetClient {
  private readonly baseUrl: string;
  private readonly apiKey: string | undefined;
  /**
   * `apiKey`: a key from `fleet keys create`, sent as `Authorization: Bearer KEY`. Without
   * one, only an API in dev mode (no key stored, loopback) answers.
   */
  constructor(options: { baseUrl: string; apiKey?: string }) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.apiKey = options.apiKey || undefined;
  }

  private async request<T>(method: string, path: string, body?: unknown): Promise<T> {
    const headers: Record<string, string> = {};
    if (body !== undefined) headers["content-type"] = "application/json";
    if (this.apiKey !== undefined) headers.authorization = `Bearer ${this.apiKey}`;
    const response = await fetch(`${this.baseUrl}${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    const json = text ? JSON.parse(text) : undefined;
    if (!response.ok) {
      const error = json?.error ?? {};
      throw new FleetApiError(
        response.status,
        error.code ?? "http_error",
        error.message ?? `${method} ${path}: HTTP ${response.status}`,
        error.reason,
        error.field,
      );
    }
    return json as T;
  }

  createSession(input: {
    agent: AgentConfigInput;
    metadata?: Record<string, unknown>;
    messages?: Message[];
  }): Promise<{ id: string }> {
    return this.request("POST", "/v1/sessions", input);
  }

  /** Creates many sessions (each optionally with its first message) in one request, all or none. */
  createBatch(
    sessions: {
      agent: AgentConfigInput;
      metadata?: Record<string, unknown>;
      messages?: Message[];
      input?: string;
    }[],
  ): Promise<{ sessions: { id: string; runId: string | null }[] }> {
    return this.request("POST", "/v1/batches", { sessions });
  }

  /** Sessions, newest activity first; `status: "parked"` lists the ones waiting for an operator. */
  listSessions(
    options: { status?: "parked" | "active"; limit?: number } = {},
  ): Promise<{ sessions: SessionSummary[] }> {
    const params = new URLSearchParams();
    if (options.status) params.set("status", options.status);
    if (options.limit) params.set("limit", String(options.limit));
    const query = params.size > 0 ? `?${params}` : "";
    return this.request("GET", `/v1/sessions${query}`);
  }

  send(sessionId: string, content: string): Promise<{ runId: string }> {
    return this.request("POST", `/v1/sessions/${encodeURIComponent(sessionId)}/messages`, { content });
  }

  resume(
    sessionId: string,
    options: { model?: ModelConfig } = {},
  ): Promise<{ runId: string; kind: ResumeKind }> {
    return this.request("POST", `/v1/sessions/${encodeURIComponent(sessionId)}/resume`, options);
  }

  resumePoint(sessionId: string): Promise<ResumePointJson> {
    return this.request("GET", `/v1/sessions/${encodeURIComponent(sessionId)}/resume-point`);
  }

  getSession(sessionId: string): Promise<SessionJson> {
    return this.request("GET", `/v1/sessions/${encodeURIComponent(sessionId)}`);
  }

  getRun(runId: string): Promise<RunWithSession> {
    return this.request("GET", `/v1/runs/${encodeURIComponent(runId)}`);
  }

  /** Polls until the run has ended; rejects after `timeoutMs` (default 60 s). */
  async waitForRun(
    runId: string,
    options: { timeoutMs?: number; intervalMs?: number } = {},
  ): Promise<RunWithSession> {
    const deadline = Date.now() + (options.timeoutMs ?? 60_000);
    for (;;) {
      const run = await this.getRun(runId);
      if (run.status === "ended") return run;
      if (Date.now() > deadline)
        throw new Error(`run ${runId} has not ended after ${options.timeoutMs ?? 60_000} ms`);
      await new Promise((resolve) => setTimeout(resolve, options.intervalMs ?? 50));
    }
  }
}
