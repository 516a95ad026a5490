/** FleetClient's batch calls (client.ts): create, add to, read, cancel, resume, delete, results, events. */
import type { ModelConfig } from "../shared/agent-config.js";
import type { FleetEvent } from "../shared/api-events.js";
import type {
  BatchCreated,
  BatchJson,
  BatchResult,
  BatchResumePage,
  UsageTotals,
} from "../shared/api-types.js";
import { batchResultLines } from "./batch-result-lines.js";
import { ClientBase } from "./client-base.js";
import { eventStream } from "./client-event-streams.js";
import type { BatchSessionInput, EventsOptions, PostOptions } from "./client-options.js";
import { rereadStep } from "./stream-reread.js";

export class BatchCalls extends ClientBase {
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
   * Deletes a batch and all its sessions; it answers 404 at once. `complete` is false when
   * the sweeper deletes the sessions this request did not get to.
   */
  deleteBatch(
    batchId: string,
    options: PostOptions = {},
  ): Promise<{ id: string; deleted: true; sessionsDeleted: number; complete: boolean }> {
    return this.request("DELETE", `/v1/batches/${encodeURIComponent(batchId)}`, undefined, options);
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
   * A batch's events: SESSION_ENDED per session that reaches a terminal state, then
   * BATCH_COMPLETED, which is the last: the iterator ends after yielding it (nothing follows
   * it), so `for await` over a batch finishes when the batch does. Resumed (`after`) at or
   * after BATCH_COMPLETED, it yields nothing and returns (the API answers 204). Its own
   * reconnect answered 410 (the stream written anew: Redis lost its data) reads the batch's
   * events again from the start, each session's end once; from the caller's `after`, the 410
   * rejects as before.
   */
  async *batchEvents(batchId: string, options: EventsOptions = {}): AsyncGenerator<FleetEvent> {
    const path = `/v1/batches/${encodeURIComponent(batchId)}/events`;
    let after = options.after;
    const step = rereadStep();
    for (;;) {
      try {
        for await (const event of eventStream(this.http, path, { ...options, after })) {
          if (event.id) after = event.id;
          if (!step.pass(event)) continue;
          yield event;
          if (event.type === "BATCH_COMPLETED") return;
        }
        return;
      } catch (error) {
        // Its own reconnect's place is gone (the stream written anew: stream-reread.ts): read
        // from the start again, each session's end once. Not so from the caller's `after`:
        // what it had before that is not known here.
        if (options.after !== undefined || after === undefined || !step.follow(error)) throw error;
        after = undefined;
      }
    }
  }
}
