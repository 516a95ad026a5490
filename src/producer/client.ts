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
import type { ResumePointJson } from "../shared/resume-point.js";
import type {
  BatchSessionInput,
  EventsOptions,
  Goal,
  PostOptions,
  RunWithSession,
  SessionPageOptions,
} from "./client-options.js";
import { RunCalls } from "./client-run-calls.js";
import { messagePages } from "./message-pages.js";

export { isEventType } from "../shared/api-events.js";
// For a backend that receives batch webhooks: the client's package is what it has installed.
export { verifyWebhookSignature } from "../shared/webhook-signature.js";
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

export class FleetClient extends RunCalls {
  createSession(
    input: {
      agent: AgentConfigInput;
      metadata?: Record<string, unknown> | undefined;
      messages?: Message[] | undefined;
      /** false: no event stream is written for it (`events()` rejects with 409 `session_events_off`). */
      sessionEvents?: boolean | undefined;
      /**
       * What the imported session already spent of `agent.budget` beyond `messages`' steps
       * (each counts one model call and its reported tokens anyway): `fleet session import`
       * sends what the export's `spent` holds beyond them.
       */
      spentOutsideHistory?: { modelCalls?: number; tokens?: number } | undefined;
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
   * Deletes a session with its messages, runs and events, whatever its state (a running run
   * is stopped); afterwards it answers 404. 404 for an id that does not exist or is another
   * tenant's. `idempotencyKey` makes a retry return the first answer instead of a 404.
   */
  deleteSession(sessionId: string, options: PostOptions = {}): Promise<{ id: string; deleted: true }> {
    return this.request("DELETE", `/v1/sessions/${encodeURIComponent(sessionId)}`, undefined, options);
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
}
