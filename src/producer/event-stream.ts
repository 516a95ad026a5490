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
 * - At most FLEET_SSE_MAX_STREAMS_PER_TENANT streams per tenant on one API process: more
 *   answer `429` (`limit: "event_streams"`), so event streams cannot exhaust the API.
 * - A batch's events (`SESSION_ENDED` per session that reached a terminal state, then one
 *   `BATCH_COMPLETED`) are derived from Postgres by whichever API process serves a reader,
 *   once a second — in full every 30 s, otherwise only the sessions that changed
 *   (batch-event-sync.ts) — and written once each (a Redis set remembers what was written)
 *   to the batch's own stream, `<prefix>:batch-events:<batchId>`; readers read that stream
 *   with the same resume rules.
 */
import type { ServerResponse } from "node:http";
import type { FastifyReply, FastifyRequest } from "fastify";
import { ConflictError, NotFoundError, ValidationError } from "../shared/errors.js";
import { placeMayHaveExpired, STREAM_START } from "../shared/event-expiry.js";
import { EventReader } from "../shared/event-reader.js";
import { eventStreamKey, eventsNotifyChannel, eventTime, type StoredEvent } from "../shared/events.js";
import { batchEventWriter, defineBatchEventsAppend } from "./batch-event-append.js";
import { BatchEventSync } from "./batch-event-sync.js";
import { BatchStreamCheck, batchStreamKeys } from "./batch-stream-check.js";
import type { EventStreamDeps } from "./event-stream-deps.js";
import { type DrainEnd, waitForDrain } from "./event-stream-drain.js";
import { NotifySubscription } from "./notify-subscription.js";
import { RedisReconnects } from "./redis-reconnects.js";
import { gone, resumeId, type StartPlace, sentPlace, sessionStreamStart } from "./stream-places.js";
import { TenantStreamSlots } from "./tenant-stream-slots.js";

export type { EventStreamDeps } from "./event-stream-deps.js";

/** The last event of a deleted session's or batch's stream: the response ends after it. */
const STREAM_ENDS = new Set(["SESSION_DELETED", "BATCH_DELETED"]);

/** Entries read from Redis at a time. */
const READ_PAGE = 200;

/** How often an open stream asks whether its caller may still read it. */
const RECHECK_MS = 1_000;

/** FLEET_SSE_STALL_MS's default, for callers that give none. */
const DEFAULT_STALL_MS = 60_000;

function stalledMessage(end: Exclude<DrainEnd, "drained">): string {
  switch (end) {
    case "stalled":
      return "event stream reader took nothing for FLEET_SSE_STALL_MS; closed its connection";
    case "refused":
      return "event stream reader's key no longer works (or the API stops) while it read nothing; closed its connection";
  }
}

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
    const key = eventStreamKey(this.deps.prefix, sessionId);
    let start: StartPlace;
    if (after !== null) {
      if (await this.reader.expired(key, after)) {
        this.deps.metrics.eventPlacesGone?.inc({ stream: "session" });
        return gone(reply, after);
      }
      start = sentPlace(after);
    } else start = await sessionStreamStart(this.reader, this.deps.queries, key, sessionId, tenant, runParam);
    const repair = this.deps.repairRunEnd;
    await this.serve(
      request,
      reply,
      tenant,
      key,
      start,
      undefined,
      repair && (() => repair(sessionId)),
      this.deps.sessionStreamOn &&
        (async () => (await this.deps.sessionStreamOn?.(sessionId, tenant)) === true),
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
      return gone(reply, after);
    }
    const start: StartPlace = after === null ? { id: STREAM_START, kind: "kept" } : sentPlace(after);
    await this.serve(request, reply, tenant, key, start, () => sync.sync());
  }

  private async serve(
    request: FastifyRequest,
    reply: FastifyReply,
    tenant: string,
    key: string,
    /** Where the reader starts, and what its first read must still find there (stream-places.ts). */
    start: StartPlace,
    before?: () => Promise<void>,
    /** Called as the stream opens and at each heartbeat (what it writes is read as any event). */
    idle?: () => Promise<unknown>,
    /**
     * Whether the stream is still the caller's to read, asked when a wake brought nothing new
     * and at each heartbeat (not every second: one query per open stream and second would
     * add up): it ends at the first no.
     */
    still?: () => Promise<boolean>,
  ): Promise<void> {
    const release = this.slots.admit(tenant);
    let unsubscribe: Awaited<ReturnType<NotifySubscription["acquire"]>>;
    try {
      unsubscribe = await this.notifications.acquire();
    } catch (error) {
      release();
      throw error;
    }
    reply.hijack();
    const response = reply.raw;
    response.writeHead(200, {
      "content-type": "text/event-stream; charset=utf-8",
      "cache-control": "no-cache, no-transform",
      connection: "keep-alive",
      "x-accel-buffering": "no",
    });
    response.write(": events\n\n");
    this.open.add(response);
    let gone = false;
    let wake: () => void = () => {};
    const wakers = this.waiting.get(key) ?? new Set<() => void>();
    this.waiting.set(key, wakers);
    const waker = () => wake();
    wakers.add(waker);
    const onClose = () => {
      gone = true;
      wake();
    };
    response.on("close", onClose);
    // The client's FIN ends the stream too: the API answers half-closed clients
    // (http-api.ts), and a reader that closed its connection sent one, nothing else.
    const socket = request.raw.socket;
    socket.on("end", onClose);
    // Gone before the listeners were there (while the session was read, or the subscription
    // made): neither event comes again, and the stream would hold its slot for ever.
    if (socket.destroyed || socket.readableEnded) gone = true;
    let last = start.id;
    // Whether `last` is an entry of the stream (an id the reader sent, checked by the route, the
    // stream's newest or a run's RUN_STARTED at connect, or one it was sent), not `0-0`.
    let placeIsEntry = start.kind === "entry" || start.kind === "at";
    // Whether `last` itself is still to be sent (a run's RUN_STARTED).
    let inclusive = start.kind === "at";
    let seenReconnects = this.redisBack.reconnects;
    let lastWrite = Date.now();
    const pollMs = this.deps.pollMs ?? 1_000;
    const onIdle = () =>
      idle?.().catch((error: unknown) =>
        request.log.warn({ err: error }, "checking the stream for a lost run end failed; tried again later"),
      );
    await onIdle();
    let checkedAt = Date.now();
    /** Whether this pass follows a wake (a write or a drop of this stream), not a timer. */
    let byWake = false;
    /**
     * The entries after `last`; null when some of them may be gone (the reader ends, and its
     * reconnect gets 410). Trimming keeps the newest FLEET_EVENTS_MAX entries, so only a reader
     * with a page or more after its place (one that reads slower than the session writes) can
     * have lost any; whether it did is asked after the read: a place still kept now was kept
     * when it was read.
     */
    const readAfter = async (): Promise<StoredEvent[] | null> => {
      let page: StoredEvent[];
      if (placeIsEntry) {
        // From its place itself, which must still be there: a place gone while it was not
        // trimmed away is one the stream lost — Redis restored from an older snapshot, or the
        // stream dropped and rebuilt after a Postgres restore (events.ts) — and what follows
        // it now is written anew, messages this reader has among it. It ends (410 on reconnect).
        // Trimmed by the byte bound (FLEET_EVENTS_MAX_BYTES: a few big events can be far fewer
        // than a page), it ends too when an entry after its place went with it.
        // That holds from the first read: a place taken at connect may be trimmed before it.
        const rows = await this.reader.from(key, last, READ_PAGE + 1);
        if (rows.length > 0 && rows[0]!.id !== last && (await this.reader.placeGone(key, last))) return null;
        page = rows[0]?.id === last && !inclusive ? rows.slice(1) : rows.slice(0, READ_PAGE);
      } else {
        page = await this.reader.after(key, last, READ_PAGE);
        // From the stream's start, found untrimmed at connect (`after=0-0`): trimmed since, the
        // page may begin past entries this reader never got. It ends (410 on reconnect).
        if (start.kind === "start" && page.length > 0 && (await this.reader.expired(key, STREAM_START)))
          return null;
      }
      if (placeIsEntry && page.length >= Math.min(READ_PAGE, this.deps.retention.maxEvents))
        if (await this.reader.expired(key, last)) return null;
      return page;
    };
    /**
     * Whether the caller may still read (its key not revoked), asked at most every RECHECK_MS:
     * between passes and between the pages of one, so a reader behind by a backlog (slow, or
     * following a session that keeps writing) stops too, not only one that caught up.
     */
    const allowed = async (): Promise<boolean> => {
      if (!this.deps.stillAllowed || Date.now() - checkedAt < RECHECK_MS) return true;
      checkedAt = Date.now();
      return this.deps.stillAllowed(request, tenant);
    };
    try {
      while (!gone && !this.closed) {
        if (!(await allowed())) break;
        let woken = false;
        const nap = new Promise<void>((resolve) => {
          wake = () => {
            woken = true;
            resolve();
          };
        });
        if (before) await before();
        if (seenReconnects !== this.redisBack.reconnects) {
          // Redis came back. Without its data the stream is rebuilt from Postgres under new
          // ids, all after `last`: this reader would get every message again. It ends instead,
          // and its reconnect with `last` is answered 410 (EventReader.expired).
          seenReconnects = this.redisBack.reconnects;
          if (last !== "0-0" && (await this.reader.expired(key, last, placeIsEntry))) break;
        }
        // A stream idle for FLEET_EVENTS_MAX_AGE_MS expires whole and its next writer starts a
        // new one (every stored message first): a reader whose place went with it ends here,
        // and its reconnect gets 410, rather than read those messages a second time.
        if (
          placeMayHaveExpired(last, this.deps.retention.maxAgeMs, Date.now()) &&
          (await this.reader.expired(key, last, placeIsEntry))
        )
          break;
        let events: StoredEvent[] | null = await readAfter();
        const fresh = events?.length ?? 0;
        while (events !== null && events.length > 0 && !gone) {
          for (const event of events) {
            // `at`: when the event entered the stream (events.ts eventTime), for readers that
            // show an event's time.
            const at = eventTime(event.id);
            if (at !== null) event.data.at = at;
            const ok = response.write(
              `id: ${event.id}\nevent: ${event.type}\ndata: ${JSON.stringify(event.data)}\n\n`,
            );
            last = event.id;
            placeIsEntry = true;
            inclusive = false;
            if (!ok) {
              // A reader that takes nothing for FLEET_SSE_STALL_MS, or whose key is revoked
              // meanwhile, is closed: destroyed, so what the buffers hold is not sent later.
              const end = await waitForDrain(response, {
                stallMs: this.deps.stallMs ?? DEFAULT_STALL_MS,
                tickMs: RECHECK_MS,
                mayGoOn: async () => !this.closed && (await allowed()),
              });
              if (end !== "drained") {
                request.log.info({ end }, stalledMessage(end));
                response.destroy();
                gone = true;
                break;
              }
            }
            // The session (or batch) was deleted: nothing follows (deletion-cleanup.ts).
            if (STREAM_ENDS.has(event.type)) {
              gone = true;
              break;
            }
          }
          lastWrite = Date.now();
          events = gone || (await allowed()) ? await readAfter() : null;
        }
        if (events === null) break;
        if (gone) break;
        // Woken for nothing new: the stream may have been dropped (sessionEvents turned off).
        if (still && byWake && fresh === 0 && !(await still())) break;
        if (Date.now() - lastWrite >= this.deps.heartbeatMs) {
          response.write(": heartbeat\n\n");
          lastWrite = Date.now();
          await onIdle();
          // And at each heartbeat, in case the drop could not wake it (Redis away then).
          if (still && !(await still())) break;
        }
        if (!woken) {
          const wait = Math.min(pollMs, Math.max(10, this.deps.heartbeatMs - (Date.now() - lastWrite)));
          let timer: NodeJS.Timeout | undefined;
          await Promise.race([nap, new Promise<void>((resolve) => (timer = setTimeout(resolve, wait)))]);
          clearTimeout(timer);
        }
        byWake = woken;
      }
    } catch (error) {
      request.log.warn({ err: error }, "event stream failed; closing it");
    } finally {
      wakers.delete(waker);
      if (wakers.size === 0 && this.waiting.get(key) === wakers) this.waiting.delete(key);
      response.off("close", onClose);
      socket.off("end", onClose);
      this.open.delete(response);
      release();
      unsubscribe((error) =>
        request.log.warn(
          { err: error },
          "unsubscribing from event notifications failed; the next reader to leave tries again",
        ),
      );
      if (!response.writableEnded) response.end();
    }
  }
}
