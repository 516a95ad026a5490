/**
 * The TypeScript client of the HTTP API, exported by the package:
 *
 *   const fleet = new FleetClient({ baseUrl: "http://127.0.0.1:3000", apiKey: process.env.FLEET_API_KEY });
 *   const { id } = await fleet.createSession({ agent });
 *   const { runId } = await fleet.send(id, "Write notes.txt");
 *   const run = await fleet.waitForRun(runId);
 */
import type { AgentConfigInput, ModelConfig } from "../shared/agent-config.js";
import type {
  FleetEvent,
  FleetEventDataByType,
  FleetEventType,
  KnownFleetEvent,
  OtherFleetEvent,
} from "../shared/api-events.js";
import type {
  BatchCreated,
  BatchJson,
  BatchResult,
  BatchResumePage,
  RunJson,
  RunStatus,
  SessionJson,
  SessionStatus,
  SessionSummary,
  UsageTotals,
} from "../shared/api-types.js";
import type { Message } from "../shared/messages.js";
import type { ResumeKind, ResumePointJson } from "../shared/resume-point.js";
import { ApiTransport, type RequestArgs } from "./api-transport.js";
import { batchResultLines } from "./batch-result-lines.js";
import { eventStream, runEvents } from "./client-event-streams.js";
import type {
  BatchSessionInput,
  EventsOptions,
  Goal,
  PostOptions,
  RunWithSession,
  SessionPageOptions,
} from "./client-options.js";
import { messagePages } from "./message-pages.js";
import { pollUntilEnded } from "./run-wait.js";

export { isEventType } from "../shared/api-events.js";
export { FleetApiError, FleetNetworkError } from "./client-errors.js";
export { parseSse } from "./server-sent-events.js";
export type {
  AgentConfigInput,
  BatchCreated,
  BatchJson,
  BatchResult,
  BatchResumePage,
  BatchSessionInput,
  EventsOptions,
  FleetEvent,
  FleetEventDataByType,
  FleetEventType,
  Goal,
  KnownFleetEvent,
  Message,
  ModelConfig,
  OtherFleetEvent,
  PostOptions,
  ResumePointJson,
  RunJson,
  RunStatus,
  RunWithSession,
  SessionJson,
  SessionPageOptions,
  SessionStatus,
  SessionSummary,
  UsageTotals,
};

export class FleetClient {
  private readonly http: ApiTransport;
  private readonly baseUrl: string;

  /**
   * `apiKey`: a key from `fleet keys create`, sent as `Authorization: Bearer KEY`. Without
   * one, only an API in dev mode (no key stored, loopback) answers. A key that header cannot
   * carry (anything but visible ASCII, once surrounding whitespace is dropped) throws a
   * TypeError here that does not repeat it.
   * `maxLimitWaitMs`: a call refused with 429 (a tenant limit; nothing was done) is sent
   * again after the Retry-After the API gives, until this much time was spent waiting
   * (default 30 s; 0: never).
   * `baseUrl`: an http:// or https:// URL (a path after the host is kept); anything else
   * (`"localhost:8080"`, `"ftp://x"`, `""`, a URL with a user name or password) throws a
   * TypeError here, naming it.
   */
  constructor(options: {
    baseUrl: string;
    apiKey?: string | undefined;
    maxLimitWaitMs?: number | undefined;
  }) {
    this.http = new ApiTransport(options);
    this.baseUrl = this.http.baseUrl;
  }

  private request<T>(...args: RequestArgs): Promise<T> {
    return this.http.request<T>(...args);
  }

  createSession(
    input: {
      agent: AgentConfigInput;
      metadata?: Record<string, unknown> | undefined;
      messages?: Message[] | undefined;
      /** false: no event stream is written for it (`events()` rejects with 409 `session_events_off`). */
      sessionEvents?: boolean | undefined;
    },
    options: PostOptions = {},
  ): Promise<{ id: string }> {
    return this.request("POST", "/v1/sessions", input, options);
  }

  /**
   * Continues the imported history of a session that has run nothing yet with `messages`,
   * stored right after seq `afterSeq` (the session's last): what one createSession cannot
   * hold (at most 10,000 messages a request). Answers the new `lastSeq`. A 409
   * `seq_mismatch` says the session does not end at `afterSeq` (a page stored though its
   * answer was lost, say): its message names the seq the session ends at, and
   * `getSession(id, { afterSeq })` gives what is stored after yours.
   */
  importMessages(
    sessionId: string,
    messages: Message[],
    options: PostOptions & { afterSeq: number },
  ): Promise<{ lastSeq: number }> {
    const { afterSeq, ...post } = options;
    return this.request(
      "POST",
      `/v1/sessions/${encodeURIComponent(sessionId)}/history`,
      { afterSeq, messages },
      post,
    );
  }

  /**
   * Creates a batch of sessions (each optionally with its first message) in one request, all
   * or none. `webhook`: POSTed the batch once it has ended; `open`: more sessions follow
   * (`appendToBatch`), and the batch does not end before the last part closes it;
   * `sessionEvents: false`: none of its sessions has an event stream (less Redis memory and
   * worker time; follow the batch by `getBatch`, `batchEvents` and the webhook).
   */
  createBatch(
    sessions: BatchSessionInput[],
    options: PostOptions & {
      webhook?: { url: string } | undefined;
      open?: boolean | undefined;
      sessionEvents?: boolean | undefined;
    } = {},
  ): Promise<BatchCreated> {
    const { idempotencyKey, ...rest } = options;
    return this.request("POST", "/v1/batches", { sessions, ...rest }, { idempotencyKey });
  }

  /** Adds sessions to an open batch; `close: true` with the last part. */
  appendToBatch(
    batchId: string,
    sessions: BatchSessionInput[],
    options: PostOptions & { close?: boolean | undefined } = {},
  ): Promise<BatchCreated> {
    const { idempotencyKey, ...rest } = options;
    return this.request(
      "POST",
      `/v1/batches/${encodeURIComponent(batchId)}/sessions`,
      { sessions, ...rest },
      { idempotencyKey },
    );
  }

  /**
   * The batch: status (`running`, `ended`, `cancelled`) and counts by current state;
   * `include: "usage"` adds `usage`, its sessions' tokens and cost summed (one aggregate).
   */
  getBatch(
    batchId: string,
    options: { include?: "usage" | undefined } = {},
  ): Promise<BatchJson & { usage?: UsageTotals }> {
    const query = options.include ? `?include=${encodeURIComponent(options.include)}` : "";
    return this.request("GET", `/v1/batches/${encodeURIComponent(batchId)}${query}`);
  }

  /** Cancels every session of the batch that has not ended. */
  cancelBatch(batchId: string, options: PostOptions = {}): Promise<BatchJson> {
    return this.request("POST", `/v1/batches/${encodeURIComponent(batchId)}/cancel`, undefined, options);
  }

  /**
   * Resumes one page of the batch's parked sessions — only those parked for `parkedReason`
   * (e.g. `provider_rejected`) when given, with another `model` when given. Pass the answer's
   * `nextCursor` back as `cursor` until it is null; sessions with nothing to resume are listed
   * in `refused` and stay parked.
   */
  resumeBatch(
    batchId: string,
    options: PostOptions & {
      parkedReason?: string | undefined;
      model?: ModelConfig | undefined;
      cursor?: string | undefined;
      limit?: number | undefined;
    } = {},
  ): Promise<BatchResumePage> {
    const { idempotencyKey, ...body } = options;
    return this.request("POST", `/v1/batches/${encodeURIComponent(batchId)}/resume`, body, {
      idempotencyKey,
    });
  }

  /**
   * Deletes a session with its messages, runs and events, whatever its state (a running run
   * is stopped); afterwards it answers 404. 404 for an id that does not exist or is another
   * tenant's. `idempotencyKey` makes a retry return the first answer instead of a 404.
   */
  deleteSession(sessionId: string, options: PostOptions = {}): Promise<{ id: string; deleted: true }> {
    return this.request("DELETE", `/v1/sessions/${encodeURIComponent(sessionId)}`, undefined, options);
  }

  /**
   * Deletes a batch and all its sessions; it answers 404 at once. `complete` is false when
   * the sweeper deletes the sessions this request did not get to.
   */
  deleteBatch(
    batchId: string,
    options: PostOptions = {},
  ): Promise<{ id: string; deleted: true; sessionsDeleted: number; complete: boolean }> {
    return this.request("DELETE", `/v1/batches/${encodeURIComponent(batchId)}`, undefined, options);
  }

  /** Cancels a session: queued runs dropped, a running one aborted; never resumed automatically. */
  cancelSession(
    sessionId: string,
    options: PostOptions = {},
  ): Promise<{ id: string; status: SessionStatus; cancelled: boolean }> {
    return this.request("POST", `/v1/sessions/${encodeURIComponent(sessionId)}/cancel`, undefined, options);
  }

  /**
   * The secret that signs this tenant's batch webhooks (`GET /v1/webhook-secret`), when the
   * operator turned on per-tenant secrets; a 404 FleetApiError when they are off.
   */
  webhookSecret(): Promise<{ secret: string }> {
    return this.request("GET", "/v1/webhook-secret");
  }

  /**
   * Rotates this tenant's own webhook signing secret (`POST /v1/webhook-secret/rotate`): the
   * new generation, and until when the secret it replaced still signs deliveries too. Read the
   * new secret with webhookSecret(). With `idempotencyKey`, a retry rotates nothing.
   */
  rotateWebhookSecret(
    options: PostOptions = {},
  ): Promise<{ generation: number; previousValidUntil: string }> {
    return this.request("POST", "/v1/webhook-secret/rotate", undefined, options);
  }

  /** The API's OpenAPI 3.1 document (`GET /v1/openapi.json`), e.g. to generate a client in another language. */
  openapi(): Promise<Record<string, unknown>> {
    return this.request("GET", "/v1/openapi.json");
  }

  /**
   * Turns the session's event stream on or off after its creation (`PATCH /v1/sessions/:id`).
   * On: its stored messages are in the stream when this resolves, and its runs' events follow
   * from its next run. Off: the stream is dropped, open `events()` of it end, and a new one
   * rejects with 409 `session_events_off`. 400 for on in a batch created without streams.
   */
  setSessionEvents(sessionId: string, on: boolean): Promise<{ id: string; sessionEvents: boolean }> {
    return this.request("PATCH", `/v1/sessions/${encodeURIComponent(sessionId)}`, { sessionEvents: on });
  }

  /**
   * The batch's results, one parsed NDJSON line at a time as they stream in (the response
   * is read as it is iterated, so memory stays flat for any batch size). `signal` stops the
   * request (the iteration rejects with its reason); so does leaving the loop. A line that is
   * not a JSON object rejects it with a FleetApiError `invalid_response` naming the line. A
   * connection that breaks after a line goes on after the last session read (`?after=`), each
   * line once; reconnects that find no API (or a 502/503/504) give up after 30 s.
   */
  async *batchResults(
    batchId: string,
    options: { signal?: AbortSignal | undefined } = {},
  ): AsyncGenerator<BatchResult> {
    const { signal } = options;
    yield* batchResultLines(this.http, `/v1/batches/${encodeURIComponent(batchId)}/results`, signal);
  }

  /**
   * Sessions, newest activity first; `status: "parked"` lists the ones waiting for an
   * operator; `batch` only one batch's (with `status` by current state, as its counts).
   */
  listSessions(
    options: {
      status?: "parked" | "active" | "cancelled" | "queued" | "running" | "completed" | undefined;
      batch?: string | undefined;
      /** Parked sessions whose reason starts with this (e.g. `attempts_exhausted`). */
      parkedReason?: string | undefined;
      limit?: number | undefined;
      /** The `nextCursor` of the previous page. */
      before?: string | undefined;
    } = {},
  ): Promise<{ sessions: SessionSummary[]; nextCursor?: string | null }> {
    // Every filter given is sent, an empty or zero one too, for the API to refuse: dropped, a
    // `batch: ""` (an id not filled in) listed every batch's sessions, a `parkedReason: ""` every
    // session, `limit: 0` a page of 100 and `before: ""` the first page again.
    const params = new URLSearchParams();
    if (options.status !== undefined) params.set("status", options.status);
    if (options.batch !== undefined) params.set("batch", options.batch);
    if (options.parkedReason !== undefined) params.set("parkedReason", options.parkedReason);
    if (options.limit !== undefined) params.set("limit", String(options.limit));
    if (options.before !== undefined) params.set("before", options.before);
    const query = params.size > 0 ? `?${params}` : "";
    return this.request("GET", `/v1/sessions${query}`);
  }

  /** Sends a user message (queues a run); `goal`: goal mode for that run only (contracts §8). */
  send(
    sessionId: string,
    content: string,
    options: PostOptions & { goal?: Goal | undefined } = {},
  ): Promise<{ runId: string }> {
    return this.sendMessage(sessionId, content, options);
  }

  /** `send`, stopped by `signal` (`stream()`'s): its request and a wait for a 429's Retry-After. */
  private sendMessage(
    sessionId: string,
    content: string,
    options: PostOptions & { goal?: Goal | undefined },
    signal?: AbortSignal,
  ): Promise<{ runId: string }> {
    const { goal, ...post } = options;
    return this.request(
      "POST",
      `/v1/sessions/${encodeURIComponent(sessionId)}/messages`,
      { content, ...(goal ? { goal } : {}) },
      post,
      signal,
    );
  }

  /**
   * The session's events (contracts §7), as they happen: an iterator that reconnects by
   * itself after a dropped connection with the last id it received, so every retained event
   * comes once, in order. An id older than what the fleet keeps rejects with a FleetApiError
   * 410 (`reason: "expired"`); 4xx answers but 429 reject at once, and so does an event that is not
   * one (its data not a JSON object: `invalid_response`, with its `eventId` to read on after
   * it). Runs until `signal` aborts, the caller stops iterating, or the session is deleted
   * (its last event is SESSION_DELETED).
   */
  events(sessionId: string, options: EventsOptions = {}): AsyncGenerator<FleetEvent> {
    return eventStream(this.http, `/v1/sessions/${encodeURIComponent(sessionId)}/events`, options);
  }

  /**
   * A batch's events: SESSION_ENDED per session that reaches a terminal state, then
   * BATCH_COMPLETED, which is the last: the iterator ends after yielding it (nothing follows
   * it), so `for await` over a batch finishes when the batch does.
   */
  async *batchEvents(batchId: string, options: EventsOptions = {}): AsyncGenerator<FleetEvent> {
    for await (const event of eventStream(
      this.http,
      `/v1/batches/${encodeURIComponent(batchId)}/events`,
      options,
    )) {
      yield event;
      if (event.type === "BATCH_COMPLETED") return;
    }
  }

  /** Sends `content` and yields that run's events, up to and including its RUN_COMPLETED. */
  async *stream(
    sessionId: string,
    content: string,
    options: PostOptions & { goal?: Goal | undefined; signal?: AbortSignal | undefined } = {},
  ): AsyncGenerator<FleetEvent> {
    const { signal, ...send } = options;
    // Stopped before it began: nothing is queued.
    if (signal?.aborted) return;
    // The signal stops the POST too (and its wait for a 429's Retry-After), rejecting with
    // its reason: whether a POST cut in flight was done is not known (see PostOptions).
    const { runId } = await this.sendMessage(sessionId, content, send, signal);
    yield* runEvents(this.http, sessionId, runId, signal);
  }

  /** Asks for a resume (optionally with another model) and yields its events up to its RUN_COMPLETED. */
  async *streamResume(
    sessionId: string,
    options: { model?: ModelConfig | undefined; signal?: AbortSignal | undefined } & PostOptions = {},
  ): AsyncGenerator<FleetEvent> {
    const { signal, ...resume } = options;
    if (signal?.aborted) return;
    const { runId } = await this.resumeRun(sessionId, resume, signal);
    yield* runEvents(this.http, sessionId, runId, signal);
  }

  resume(
    sessionId: string,
    options: { model?: ModelConfig | undefined } & PostOptions = {},
  ): Promise<{ runId: string; kind: ResumeKind }> {
    return this.resumeRun(sessionId, options);
  }

  /** `resume`, stopped by `signal` (`streamResume()`'s). */
  private resumeRun(
    sessionId: string,
    options: { model?: ModelConfig | undefined } & PostOptions,
    signal?: AbortSignal,
  ): Promise<{ runId: string; kind: ResumeKind }> {
    const { idempotencyKey, ...body } = options;
    return this.request(
      "POST",
      `/v1/sessions/${encodeURIComponent(sessionId)}/resume`,
      body,
      { idempotencyKey },
      signal,
    );
  }

  resumePoint(sessionId: string): Promise<ResumePointJson> {
    return this.request("GET", `/v1/sessions/${encodeURIComponent(sessionId)}/resume-point`);
  }

  /**
   * `afterSeq`: only the messages after that seq (the rest of the session as usual);
   * `limit`: at most that many messages, with `nextAfterSeq` (null: no more now);
   * `runsLimit`: only the latest runs, `runsBefore` the older ones (`nextRunsBefore`).
   */
  async getSession(sessionId: string, options: SessionPageOptions = {}): Promise<SessionJson> {
    const { afterSeq, limit, runsLimit, runsBefore, signal } = options;
    const params = new URLSearchParams();
    if (afterSeq) params.set("afterSeq", String(afterSeq));
    if (limit !== undefined) params.set("limit", String(limit));
    if (runsLimit !== undefined) params.set("runsLimit", String(runsLimit));
    if (runsBefore !== undefined) params.set("runsBefore", runsBefore);
    const query = params.size > 0 ? `?${params}` : "";
    const session = await this.request<SessionJson>(
      "GET",
      `/v1/sessions/${encodeURIComponent(sessionId)}${query}`,
      undefined,
      {},
      signal,
    );
    // An API of the last release (a rolling upgrade) ignores `afterSeq` and sends every message.
    if (afterSeq) session.messages = session.messages.filter((m) => m.seq > afterSeq);
    return session;
  }

  /**
   * A session's stored messages after `afterSeq` (default: from the first), `pageSize` at a
   * time (default 500; one request per page, without the session's runs), in seq order,
   * until the last one stored when the page is read:
   *
   *   for await (const message of fleet.messages(id)) console.log(message.seq, message.role);
   *
   * Against an API without `limit` (a rolling upgrade) it reads the rest in one answer.
   * `signal` stops the request of the page being read (the iteration rejects with its reason).
   */
  async *messages(
    sessionId: string,
    options: {
      afterSeq?: number | undefined;
      pageSize?: number | undefined;
      signal?: AbortSignal | undefined;
    } = {},
  ): AsyncGenerator<SessionJson["messages"][number]> {
    yield* messagePages((id, page) => this.getSession(id, page), sessionId, options);
  }

  /** `signal` stops the request (it rejects with the signal's reason). */
  getRun(runId: string, options: { signal?: AbortSignal | undefined } = {}): Promise<RunWithSession> {
    return this.request("GET", `/v1/runs/${encodeURIComponent(runId)}`, undefined, {}, options.signal);
  }

  /**
   * Polls until the run has ended, and resolves with it; rejects after `timeoutMs` (default
   * 60 s), also when a request of the polling is still unanswered then (an API or proxy that
   * hangs). Polls 50 ms apart at first, then further apart up to 1 s (`intervalMs`: always
   * that far apart). `signal` stops the polling at once, rejecting with the signal's reason.
   */
  async waitForRun(
    runId: string,
    options: {
      timeoutMs?: number | undefined;
      intervalMs?: number | undefined;
      signal?: AbortSignal | undefined;
    } = {},
  ): Promise<RunWithSession> {
    return pollUntilEnded((id, poll) => this.getRun(id, poll), runId, options);
  }
}
