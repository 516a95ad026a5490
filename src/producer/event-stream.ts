/**
 * The event streams of contracts §7 as Server-Sent Events: `GET /v1/sessions/:id/events`
 * and `GET /v1/batches/:id/events`.
 *
 * - A session's events are read from its Redis Stream (events.ts says how MESSAGE events
 *   stay tied to committed messages). A reader resumes after `Last-Event-ID` (or `?after=`);
 *   without one it starts at the `RUN_STARTED` of the session's latest run (or, while that
 *   run waits in the queue, at the `RUN_STARTED` of the run still running ahead of it, else
 *   at the stream's end, so its `RUN_STARTED` comes next). An id
 *   older than what is kept answers `410` with `reason: "expired"`.
 * - Readers wait on one Redis subscription per API process (writers publish the session id
 *   after each write), held only while the process has a reader (notify-subscription.ts),
 *   and look again every second anyway; an idle stream sends a comment line every
 *   FLEET_SSE_HEARTBEAT_MS. A client that goes away frees its slot at once; one that stays but
 *   takes nothing for FLEET_SSE_STALL_MS, or whose key is revoked meanwhile, is closed
 *   (event-stream-drain.ts).
 * - At most FLEET_SSE_MAX_STREAMS_PER_TENANT streams per tenant across the fleet's API
 *   processes (leases in Redis, tenant-stream-slots.ts): more answer `429`
 *   (`limit: "event_streams"`), so event streams cannot exhaust the API.
 * - A batch's events (`SESSION_ENDED` per session that reached a terminal state, then one
 *   `BATCH_COMPLETED`) are derived from Postgres by whichever API process serves a reader,
 *   once a second — in full every 30 s, otherwise only the sessions that changed
 *   (batch-event-sync.ts) — and written once each (a Redis set remembers what was written)
 *   to the batch's own stream, `<prefix>:batch-events:<batchId>`; readers read that stream
 *   with the same resume rules.
 */
import type { ServerResponse } from "node:http";
import type { FastifyReply, FastifyRequest } from "fastify";
import { endBatchStream, endDeletedSession } from "../shared/deletion-cleanup.js";
import { ConflictError, NotFoundError, ValidationError } from "../shared/errors.js";
import { STREAM_START } from "../shared/event-expiry.js";
import { EventReader } from "../shared/event-reader.js";
import { eventStreamKey, eventsNotifyChannel } from "../shared/events.js";
import { batchEventWriter, defineBatchEventsAppend } from "./batch-event-append.js";
import { BatchEventSync } from "./batch-event-sync.js";
import { BatchStreamCheck, batchStreamKeys } from "./batch-stream-check.js";
import type { EventStreamDeps } from "./event-stream-deps.js";
import { type StreamHub, serveEvents } from "./event-stream-serve.js";
import { NotifySubscription } from "./notify-subscription.js";
import { RedisReconnects } from "./redis-reconnects.js";
import {
  batchReadToEnd,
  gone,
  resumeId,
  type StartPlace,
  sentPlace,
  sessionStreamStart,
} from "./stream-places.js";
import { TenantStreamSlots } from "./tenant-stream-slots.js";

export type { EventStreamDeps } from "./event-stream-deps.js";

export class EventStreams {
  private readonly reader: EventReader;
  private readonly slots: TenantStreamSlots;
  private readonly waiting = new Map<string, Set<() => void>>();
  private readonly open = new Set<ServerResponse>();
  private readonly notifications: NotifySubscription;
  private closed = false;
  private readonly batchCheck: BatchStreamCheck;
  /** Times the API's Redis connection came back: Redis may have lost its data meanwhile. */
  private readonly redisBack: RedisReconnects;
  /** What each open stream shares with the others (event-stream-serve.ts). */
  private readonly hub: StreamHub;

  constructor(private readonly deps: EventStreamDeps) {
    this.reader = new EventReader(deps.redis, deps.prefix);
    this.notifications = new NotifySubscription({
      connect: deps.subscriber,
      channel: eventsNotifyChannel(deps.prefix),
      onMessage: (key) => {
        for (const wake of this.waiting.get(key) ?? []) wake();
      },
    });
    this.redisBack = new RedisReconnects(deps.redis);
    this.slots = new TenantStreamSlots(deps);
    defineBatchEventsAppend(deps.redis);
    this.batchCheck = new BatchStreamCheck({
      redis: deps.redis,
      prefix: deps.prefix,
      batches: deps.batches ?? { endedAt: async () => null, missingRuns: async () => new Set() },
      onDropped: deps.onBatchStreamDropped,
    });
    this.hub = {
      deps,
      reader: this.reader,
      slots: this.slots,
      notifications: this.notifications,
      redisBack: this.redisBack,
      open: this.open,
      waiting: this.waiting,
      closed: () => this.closed,
    };
  }

  /** Ends every open stream (the API is stopping) and the subscription. */
  async close(): Promise<void> {
    this.closed = true;
    for (const response of this.open) response.end();
    this.open.clear();
    for (const wakers of this.waiting.values()) for (const wake of wakers) wake();
    this.notifications.close();
  }

  /** `GET /v1/sessions/:id/events`. */
  async session(request: FastifyRequest, reply: FastifyReply, tenant: string, sessionId: string) {
    const after = resumeId(request, ["run"]);
    const runParam = (request.query as Record<string, unknown>).run;
    if (runParam !== undefined && typeof runParam !== "string")
      throw new ValidationError("run", "must be a run id of this session");
    const session = await this.deps.queries.getSession(sessionId, tenant);
    if (!session) throw new NotFoundError(`session ${sessionId}`);
    if (!session.sessionEvents)
      throw new ConflictError(
        "session_events_off",
        `session ${sessionId} has sessionEvents: false, so it has no event stream; follow it with GET /v1/sessions/${sessionId} (or its batch's events), or turn its stream on with PATCH /v1/sessions/${sessionId} {"sessionEvents": true}`,
      );
    await this.deps.restoredTombstone?.(sessionId);
    const key = eventStreamKey(this.deps.prefix, sessionId);
    let start: StartPlace;
    if (after !== null) {
      if (await this.reader.expired(key, after)) {
        this.deps.metrics.eventPlacesGone?.inc({ stream: "session" });
        return gone(reply, after, await this.reader.lastId(key));
      }
      start = sentPlace(after);
    } else start = await sessionStreamStart(this.reader, this.deps.queries, key, sessionId, tenant, runParam);
    const repair = this.deps.repairRunEnd;
    const streamOn = this.deps.sessionStreamOn;
    // Gone (null): deleted, or its batch marked deleted (its purge, which writes the session's
    // SESSION_DELETED, comes later). Its reader is told so, as DELETE /v1/sessions/:id tells
    // it: a client stops at that event rather than reconnect into a 404.
    const still =
      streamOn &&
      (async () => {
        const on = await streamOn(sessionId, tenant);
        if (on !== null) return on;
        if ((await this.reader.last(key))?.type === "SESSION_DELETED") return true;
        await endDeletedSession(this.deps.redis, this.deps.prefix, sessionId, this.deps.retention.maxAgeMs);
        return true;
      });
    await serveEvents(
      this.hub,
      request,
      reply,
      tenant,
      key,
      start,
      undefined,
      repair && (() => repair(sessionId)),
      still,
    );
  }

  /** `GET /v1/batches/:id/events`. */
  async batch(request: FastifyRequest, reply: FastifyReply, tenant: string, batchId: string) {
    const batches = this.deps.batches;
    if (!batches) throw new NotFoundError(`batch ${batchId}`);
    const after = resumeId(request);
    const view = await batches.view(batchId, tenant);
    if (!view) throw new NotFoundError(`batch ${batchId}`);
    const key = batchStreamKeys(this.deps.prefix, batchId).stream;
    // This reader's own pass state: a full read first, then only what changed (batch-event-sync.ts).
    // The first pass, before the place is judged, drops a stream Postgres contradicts
    // (batch-stream-check.ts): a place in it is then gone (410).
    const sync = new BatchEventSync(
      {
        batches,
        write: batchEventWriter(this.deps, batchId),
        dropIfStale: () => this.batchCheck.dropIfStale(batchId),
      },
      batchId,
      tenant,
    );
    await sync.sync();
    if (after !== null && (await this.reader.expired(key, after))) {
      this.deps.metrics.eventPlacesGone?.inc({ stream: "batch" });
      return gone(reply, after, await this.reader.lastId(key));
    }
    // Resumed after the batch's end: nothing follows, and the reader is told so (204).
    if (batchReadToEnd(await this.reader.last(key), after)) return reply.code(204).send();
    const start: StartPlace = after === null ? { id: STREAM_START, kind: "kept" } : sentPlace(after);
    // Deleted (its mark committed): the stream takes no more events (what is derived then
    // is its sessions cancelled by the mark), and it ends with BATCH_DELETED, as the batch
    // answers 404 from then on. DELETE /v1/batches/:id writes that event at the mark; for a
    // mark whose writer stopped before it (or made by retention, which writes it once purged)
    // it is written here, at the next wake or heartbeat, and the next read ends the stream.
    const present = batches.present?.bind(batches);
    const there = present && (() => present(batchId));
    const still = async () => {
      if (!there || (await there())) return true;
      if ((await this.reader.last(key))?.type !== "BATCH_DELETED")
        await endBatchStream(this.deps.redis, this.deps.prefix, batchId);
      return true;
    };
    await serveEvents(
      this.hub,
      request,
      reply,
      tenant,
      key,
      start,
      async () => {
        if (!there || (await there())) await sync.sync();
      },
      undefined,
      still,
    );
  }
}
