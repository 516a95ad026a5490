/** FleetClient's calls of runs (client.ts): send, resume, their events, a run read or waited for. */
import type { ModelConfig } from "../shared/agent-config.js";
import type { FleetEvent } from "../shared/api-events.js";
import type { ResumeKind, ResumePointJson } from "../shared/resume-point.js";
import { BatchCalls } from "./client-batch-calls.js";
import { runEvents } from "./client-event-streams.js";
import type { EventsOptions, Goal, PostOptions, RunWithSession } from "./client-options.js";
import { pollUntilEnded } from "./run-wait.js";
import { sessionEvents } from "./session-follow.js";

export class RunCalls extends BatchCalls {
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
   * comes once, in order. An `after` older than what the fleet keeps rejects with a FleetApiError
   * 410 (`reason: "expired"`). Without an `after`, its own reconnect answered 410 (the stream
   * written anew: Redis lost its data) reads the session's stream again from the run of the last
   * event yielded (`?run=`; from the latest run against an API that refuses that) and leaves out
   * what was yielded (each stored message once, in order; `onRetry` is told the 410);
   * it rejects with the 410 only if messages would be missing (its place trimmed away: a
   * reader far behind). Given an `after`, a 410 rejects as before: what the caller had before
   * its id is not known here, and a re-read would yield it again. Other 4xx answers but 429 reject at once, and so does an event that is not
   * one (its data not a JSON object: `invalid_response`, with its `eventId` to read on after
   * it). Runs until `signal` aborts, the caller stops iterating, or the session is deleted
   * (its last event is SESSION_DELETED).
   */
  events(sessionId: string, options: EventsOptions = {}): AsyncGenerator<FleetEvent> {
    return sessionEvents(this.http, `/v1/sessions/${encodeURIComponent(sessionId)}/events`, options);
  }

  /**
   * Sends `content` and yields that run's events, up to and including its RUN_COMPLETED; when
   * the session is deleted first, up to its SESSION_DELETED (also before the run started).
   * A reconnect answered 410 (the stream written anew: Redis lost its data) reads the run
   * again from its start and leaves out what was yielded: each stored message once, in order.
   */
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

  /** `signal` stops the request (it rejects with the signal's reason). */
  getRun(runId: string, options: { signal?: AbortSignal | undefined } = {}): Promise<RunWithSession> {
    return this.request("GET", `/v1/runs/${encodeURIComponent(runId)}`, undefined, {}, options.signal);
  }

  /**
   * Polls until the run has ended, and resolves with it; rejects after `timeoutMs` (default
   * 60 s), also when a request of the polling is still unanswered then (an API or proxy that
   * hangs), and at once when the run waits on its parked session (`sessionParkedReason`: it
   * starts only when someone resumes the session or sends it a message). Polls 50 ms apart at first, then further apart up to 1 s (`intervalMs`: always
   * that far apart). `signal` stops the polling at once, rejecting with the signal's reason.
   * A `timeoutMs` or `intervalMs` that is NaN or negative rejects with a TypeError naming it.
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
