/**
 * One open event stream (event-stream.ts): the response held open, written as events come (a
 * page of READ_PAGE at a time from where the reader is), heartbeats while idle, and ended when
 * the reader goes, stalls, may no longer read, or may have missed events (its reconnect then
 * gets 410).
 */
import type { ServerResponse } from "node:http";
import type { FastifyReply, FastifyRequest } from "fastify";
import { placeMayHaveExpired, STREAM_START } from "../shared/event-expiry.js";
import type { EventReader } from "../shared/event-reader.js";
import { eventTime, type StoredEvent } from "../shared/events.js";
import type { EventStreamDeps } from "./event-stream-deps.js";
import { type DrainEnd, waitForDrain } from "./event-stream-drain.js";
import type { NotifySubscription } from "./notify-subscription.js";
import type { RedisReconnects } from "./redis-reconnects.js";
import type { StartPlace } from "./stream-places.js";
import type { TenantStreamSlots } from "./tenant-stream-slots.js";

/** What the streams of one EventStreams (event-stream.ts) share. */
export interface StreamHub {
  readonly deps: EventStreamDeps;
  readonly reader: EventReader;
  readonly slots: TenantStreamSlots;
  readonly notifications: NotifySubscription;
  /** Times the API's Redis connection came back: Redis may have lost its data meanwhile. */
  readonly redisBack: RedisReconnects;
  /** The responses open, ended when the API stops. */
  readonly open: Set<ServerResponse>;
  /** Each stream key's readers' wakers, called when a writer publishes the key. */
  readonly waiting: Map<string, Set<() => void>>;
  /** Whether the API is stopping (EventStreams.close()). */
  closed(): boolean;
}

/**
 * The last event of a stream, the response ends after it: a deleted session's or batch's, and
 * a batch's BATCH_COMPLETED, after which nothing is written for its readers (each session's
 * first end only, all before it: stream-places.ts `batchReadToEnd`, whose 204 answers the
 * reconnect). Before, a batch's stream read live stayed open past it with heartbeats for as
 * long as its reader stayed (`curl -N` never returned), holding one of the tenant's places.
 */
const STREAM_ENDS = new Set(["SESSION_DELETED", "BATCH_DELETED", "BATCH_COMPLETED"]);

/** An event stream's head. */
const STREAM_HEAD = {
  "content-type": "text/event-stream; charset=utf-8",
  // A tenant's events, kept by no cache (http-api.ts says so of every other answer).
  "cache-control": "no-store, no-transform",
  "x-content-type-options": "nosniff",
  connection: "keep-alive",
  "x-accel-buffering": "no",
};

/** Entries read from Redis at a time. */
const READ_PAGE = 200;

/** How often a stream waiting for its reader to drain asks whether the caller may still read it. */
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

export async function serveEvents(
  hub: StreamHub,
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
  // A HEAD (`curl -I`, a monitor) gets the stream's head and nothing more: Node sends no write
  // of a HEAD answer, its head included, until the answer ends, which a stream never does.
  if (request.method === "HEAD") {
    reply.hijack();
    reply.raw.writeHead(200, STREAM_HEAD).end();
    return;
  }
  const release = await hub.slots.admit(tenant);
  let unsubscribe: Awaited<ReturnType<NotifySubscription["acquire"]>>;
  try {
    unsubscribe = await hub.notifications.acquire();
  } catch (error) {
    release();
    throw error;
  }
  reply.hijack();
  const response = reply.raw;
  response.writeHead(200, STREAM_HEAD);
  response.write(": events\n\n");
  hub.open.add(response);
  let gone = false;
  let wake: () => void = () => {};
  const wakers = hub.waiting.get(key) ?? new Set<() => void>();
  hub.waiting.set(key, wakers);
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
  let seenReconnects = hub.redisBack.reconnects;
  let lastWrite = Date.now();
  const pollMs = hub.deps.pollMs ?? 1_000;
  const onIdle = () =>
    idle?.().catch((error: unknown) =>
      request.log.warn({ err: error }, "checking the stream for a lost run end failed; tried again later"),
    );
  await onIdle();
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
      const rows = await hub.reader.from(key, last, READ_PAGE + 1);
      if (rows.length > 0 && rows[0]!.id !== last && (await hub.reader.placeGone(key, last))) return null;
      page = rows[0]?.id === last && !inclusive ? rows.slice(1) : rows.slice(0, READ_PAGE);
    } else {
      page = await hub.reader.after(key, last, READ_PAGE);
      // From the stream's start, found untrimmed at connect (`after=0-0`): trimmed since, the
      // page may begin past entries this reader never got. It ends (410 on reconnect).
      if (start.kind === "start" && page.length > 0 && (await hub.reader.expired(key, STREAM_START)))
        return null;
    }
    if (placeIsEntry && page.length >= Math.min(READ_PAGE, hub.deps.retention.maxEvents))
      if (await hub.reader.expired(key, last)) return null;
    return page;
  };
  /**
   * Whether the caller may still read (its key not revoked): asked between passes and between
   * the pages of one, so a reader behind by a backlog (slow, or following a session that keeps
   * writing) stops too, not only one that caught up. Asked each time: auth.ts answers from its
   * cache (a look-up in Postgres at most every 5 s a key), so the stream stops at the first
   * page after the API refuses the key. Before, it asked at most every second, and a reader
   * draining fast was handed a whole backlog in the second after its key was refused.
   */
  const allowed = async (): Promise<boolean> =>
    !hub.deps.stillAllowed || hub.deps.stillAllowed(request, tenant);
  try {
    while (!gone && !hub.closed()) {
      if (!(await allowed())) break;
      let woken = false;
      const nap = new Promise<void>((resolve) => {
        wake = () => {
          woken = true;
          resolve();
        };
      });
      if (before) await before();
      if (seenReconnects !== hub.redisBack.reconnects) {
        // Redis came back. Without its data the stream is rebuilt from Postgres under new
        // ids, all after `last`: this reader would get every message again. It ends instead,
        // and its reconnect with `last` is answered 410 (EventReader.expired).
        seenReconnects = hub.redisBack.reconnects;
        if (last !== "0-0" && (await hub.reader.expired(key, last, placeIsEntry))) break;
      }
      // A stream idle for FLEET_EVENTS_MAX_AGE_MS expires whole and its next writer starts a
      // new one (every stored message first): a reader whose place went with it ends here,
      // and its reconnect gets 410, rather than read those messages a second time.
      if (
        placeMayHaveExpired(last, hub.deps.retention.maxAgeMs, Date.now()) &&
        (await hub.reader.expired(key, last, placeIsEntry))
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
              stallMs: hub.deps.stallMs ?? DEFAULT_STALL_MS,
              tickMs: RECHECK_MS,
              mayGoOn: async () => !hub.closed() && (await allowed()),
            });
            if (end !== "drained") {
              request.log.info({ end }, stalledMessage(end));
              response.destroy();
              gone = true;
              break;
            }
          }
          // The session (or batch) was deleted (deletion-cleanup.ts), or the batch ended: nothing follows.
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
      if (Date.now() - lastWrite >= hub.deps.heartbeatMs) {
        response.write(": heartbeat\n\n");
        lastWrite = Date.now();
        await onIdle();
        // And at each heartbeat, in case the drop could not wake it (Redis away then).
        if (still && !(await still())) break;
      }
      if (!woken) {
        const wait = Math.min(pollMs, Math.max(10, hub.deps.heartbeatMs - (Date.now() - lastWrite)));
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
    if (wakers.size === 0 && hub.waiting.get(key) === wakers) hub.waiting.delete(key);
    response.off("close", onClose);
    socket.off("end", onClose);
    hub.open.delete(response);
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
