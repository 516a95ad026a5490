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
import type { BatchJson, BatchResult } from "../shared/store/batches.js";
import type { RunJson } from "../shared/store/rows.js";
import type { BatchCreated, SessionJson, SessionSummary } from "./fleet-service.js";

export type { BatchCreated, BatchJson, BatchResult };

/** One session of a batch (contracts §9). */
export type BatchSessionInput = {
  agent: AgentConfigInput;
  metadata?: Record<string, unknown>;
  messages?: Message[];
  input?: string;
  /** The caller's id for it, unique within the batch; results carry it. */
  customId?: string;
};

/** `idempotencyKey`: sent as `Idempotency-Key`; a retry with the same key and body acts once. */
export type PostOptions = { idempotencyKey?: string };

/** An answer of the API other than 2xx; `reason` is set on 409 (nothing to resume). */
export class FleetApiError extends Error {
  override name = "FleetApiError";
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly reason?: string,
    readonly field?: string,
    /** On 429: the seconds the API asked to wait (Retry-After). */
    readonly retryAfter?: number,
  ) {
    super(message);
  }
}

/** How long the client waits in all for 429s of one call before giving the error back. */
const DEFAULT_MAX_LIMIT_WAIT_MS = 30_000;

export type RunWithSession = RunJson & { sessionId: string };

export class FleetClient {
  private readonly baseUrl: string;
  private readonly apiKey: string | undefined;
  /**
   * `apiKey`: a key from `fleet keys create`, sent as `Authorization: Bearer KEY`. Without
   * one, only an API in dev mode (no key stored, loopback) answers.
   */
  private readonly maxLimitWaitMs: number;
  /**
   * `maxLimitWaitMs`: a call refused with 429 (a tenant limit; nothing was done) is sent
   * again after the Retry-After the API gives, until this much time was spent waiting
   * (default 30 s; 0: never).
   */
  constructor(options: { baseUrl: string; apiKey?: string; maxLimitWaitMs?: number }) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.apiKey = options.apiKey || undefined;
    this.maxLimitWaitMs = options.maxLimitWaitMs ?? DEFAULT_MAX_LIMIT_WAIT_MS;
  }

  private async request<T>(
    method: string,
    path: string,
    body?: unknown,
    options: PostOptions = {},
  ): Promise<T> {
    let waited = 0;
    for (;;) {
      try {
        return await this.requestOnce<T>(method, path, body, options);
      } catch (error) {
        const after = error instanceof FleetApiError ? error.retryAfter : undefined;
        if (after === undefined || waited + after * 1000 > this.maxLimitWaitMs) throw error;
        await new Promise((resolve) => setTimeout(resolve, after * 1000));
        waited += after * 1000;
      }
    }
  }

  private headers(body: unknown, options: PostOptions): Record<string, string> {
    const headers: Record<string, string> = {};
    if (body !== undefined) headers["content-type"] = "application/json";
    if (this.apiKey !== undefined) headers.authorization = `Bearer ${this.apiKey}`;
    if (options.idempotencyKey !== undefined) headers["idempotency-key"] = options.idempotencyKey;
    return headers;
  }

  private async requestOnce<T>(
    method: string,
    path: string,
    body?: unknown,
    options: PostOptions = {},
  ): Promise<T> {
    const response = await fetch(`${this.baseUrl}${path}`, {
      method,
      headers: this.headers(body, options),
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    const json = text ? JSON.parse(text) : undefined;
    if (!response.ok) throw apiError(method, path, response, json);
    return json as T;
  }

  createSession(
    input: {
      agent: AgentConfigInput;
      metadata?: Record<string, unknown>;
      messages?: Message[];
    },
    options: PostOptions = {},
  ): Promise<{ id: string }> {
    return this.request("POST", "/v1/sessions", input, options);
  }

  /**
   * Creates a batch of sessions (each optionally with its first message) in one request, all
   * or none. `webhook`: POSTed the batch once it has ended; `open`: more sessions follow
   * (`appendToBatch`), and the batch does not end before the last part closes it.
   */
  createBatch(
    sessions: BatchSessionInput[],
    options: PostOptions & { webhook?: { url: string }; open?: boolean } = {},
  ): Promise<BatchCreated> {
    const { idempotencyKey, ...rest } = options;
    return this.request("POST", "/v1/batches", { sessions, ...rest }, { idempotencyKey });
  }

  /** Adds sessions to an open batch; `close: true` with the last part. */
  appendToBatch(
    batchId: string,
    sessions: BatchSessionInput[],
    options: PostOptions & { close?: boolean } = {},
  ): Promise<BatchCreated> {
    const { idempotencyKey, ...rest } = options;
    return this.request(
      "POST",
      `/v1/batches/${encodeURIComponent(batchId)}/sessions`,
      { sessions, ...rest },
      { idempotencyKey },
    );
  }

  /** The batch: status (`running`, `ended`, `cancelled`) and counts by current state. */
  getBatch(batchId: string): Promise<BatchJson> {
    return this.request("GET", `/v1/batches/${encodeURIComponent(batchId)}`);
  }

  /** Cancels every session of the batch that has not ended. */
  cancelBatch(batchId: string, options: PostOptions = {}): Promise<BatchJson> {
    return this.request("POST", `/v1/batches/${encodeURIComponent(batchId)}/cancel`, undefined, options);
  }

  /** Cancels a session: queued runs dropped, a running one aborted; never resumed automatically. */
  cancelSession(
    sessionId: string,
    options: PostOptions = {},
  ): Promise<{ id: string; status: string; cancelled: boolean }> {
    return this.request("POST", `/v1/sessions/${encodeURIComponent(sessionId)}/cancel`, undefined, options);
  }

  /**
   * The batch's results, one parsed NDJSON line at a time as they stream in (the response
   * is read as it is iterated, so memory stays flat for any batch size).
   */
  async *batchResults(batchId: string): AsyncGenerator<BatchResult> {
    const path = `/v1/batches/${encodeURIComponent(batchId)}/results`;
    const response = await fetch(`${this.baseUrl}${path}`, { headers: this.headers(undefined, {}) });
    if (!response.ok || !response.body) {
      const text = await response.text();
      throw apiError("GET", path, response, text ? JSON.parse(text) : undefined);
    }
    const decoder = new TextDecoder();
    let buffered = "";
    for await (const chunk of response.body as AsyncIterable<Uint8Array>) {
      buffered += decoder.decode(chunk, { stream: true });
      let newline = buffered.indexOf("\n");
      while (newline >= 0) {
        const line = buffered.slice(0, newline);
        buffered = buffered.slice(newline + 1);
        if (line.trim()) yield JSON.parse(line) as BatchResult;
        newline = buffered.indexOf("\n");
      }
    }
    buffered += decoder.decode();
    if (buffered.trim()) yield JSON.parse(buffered) as BatchResult;
  }

  /**
   * Sessions, newest activity first; `status: "parked"` lists the ones waiting for an
   * operator; `batch` only one batch's (with `status` by current state, as its counts).
   */
  listSessions(
    options: {
      status?: "parked" | "active" | "cancelled" | "queued" | "running" | "completed";
      batch?: string;
      limit?: number;
    } = {},
  ): Promise<{ sessions: SessionSummary[] }> {
    const params = new URLSearchParams();
    if (options.status) params.set("status", options.status);
    if (options.batch) params.set("batch", options.batch);
    if (options.limit) params.set("limit", String(options.limit));
    const query = params.size > 0 ? `?${params}` : "";
    return this.request("GET", `/v1/sessions${query}`);
  }

  send(sessionId: string, content: string, options: PostOptions = {}): Promise<{ runId: string }> {
    return this.request(
      "POST",
      `/v1/sessions/${encodeURIComponent(sessionId)}/messages`,
      { content },
      options,
    );
  }

  resume(
    sessionId: string,
    options: { model?: ModelConfig } & PostOptions = {},
  ): Promise<{ runId: string; kind: ResumeKind }> {
    const { idempotencyKey, ...body } = options;
    return this.request("POST", `/v1/sessions/${encodeURIComponent(sessionId)}/resume`, body, {
      idempotencyKey,
    });
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

/** The FleetApiError of a non-2xx answer. */
function apiError(method: string, path: string, response: Response, json: unknown): FleetApiError {
  const error = (json as { error?: Record<string, string | undefined> } | undefined)?.error ?? {};
  return new FleetApiError(
    response.status,
    error.code ?? "http_error",
    error.message ?? `${method} ${path}: HTTP ${response.status}`,
    error.reason,
    error.field,
    response.status === 429 ? Math.max(1, Number(response.headers.get("retry-after")) || 1) : undefined,
  );
}
