/**
 * How many big request bodies one API process works on at once. A 16 MiB body costs ~0.3 s
 * of the one event loop and ~150 MB while it is parsed, checked and written; before this, any
 * number were taken at once: 4 concurrent bodies held every other request (another tenant's
 * `GET /v1/sessions/:id`, `/healthz`) for seconds and the API's memory grew with each (bench/
 * big-bodies.ts). A body of BIG_BODY_BYTES or more, once it has arrived, waits for one of
 * `max` places before it is parsed; at most `waiting` wait, in arrival order, and one more is
 * answered 429 (`limit: "big_bodies"`, Retry-After) with nothing done. Small bodies never wait.
 *
 * Big answers take the same places: an unpaged `GET /v1/sessions/:id` whose messages (those
 * after its `afterSeq`, all of them without) hold BIG_BODY_BYTES or more built the whole answer
 * in memory, ~160 MB for 32 MiB, and nothing bounded how many at once (16 at once took `fleet
 * api` to 1.2 GB). One past the waiting ones is answered 429 `limit: "big_answers"`; a paged
 * read, and a poll of a big session's small tail, never wait. So does turning a big session's
 * event stream on (`PATCH /v1/sessions/:id`, "stream"), which reads its history whole to write
 * it into the stream: 12 at once of a 32 MiB session took `fleet api` to 1 GB, three rounds 2.4 GB.
 */
import { TooManyRequestsError } from "../shared/errors.js";

/** A body of at least this many bytes is big: it waits for a place (FLEET_API_MAX_BIG_BODIES). */
export const BIG_BODY_BYTES = 1024 * 1024;
/** Big bodies worked on at once, and waiting for a place, unless told otherwise. */
export const DEFAULT_BIG_BODIES = { max: 2, waiting: 8 };
/** What a big body past the waiting ones is told to wait, in seconds. */
const RETRY_AFTER_S = 2;

export class BigBodyGate {
  private working = 0;
  private readonly queue: (() => void)[] = [];

  constructor(readonly limit: { max: number; waiting: number } = DEFAULT_BIG_BODIES) {}

  /**
   * Resolves with the place's release (call it once, when the request is answered or gone)
   * once the body (or answer) may be worked on; TooManyRequestsError when `waiting` wait already.
   */
  async enter(what: "body" | "answer" | "stream" = "body"): Promise<() => void> {
    if (this.working < this.limit.max) this.working++;
    else if (this.queue.length >= this.limit.waiting)
      throw new TooManyRequestsError(
        what === "body" ? "big_bodies" : "big_answers",
        RETRY_AFTER_S,
        `this API is working on ${this.limit.max} request bodies or answers over ${BIG_BODY_BYTES / 2 ** 20} MiB and ${this.limit.waiting} more wait (FLEET_API_MAX_BIG_BODIES, FLEET_API_BIG_BODIES_WAITING); nothing of this request was done: send it again in ${RETRY_AFTER_S} s${what === "answer" ? ", or read the session in pages (?limit=)" : ""}`,
      );
    // A place handed on by a release: `working` stays counted for this body.
    else await new Promise<void>((resolve) => this.queue.push(resolve));
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.queue.shift();
      if (next) next();
      else this.working--;
    };
  }

  /** Bodies worked on now, and waiting: for tests and the benchmark. */
  get state(): { working: number; waiting: number } {
    return { working: this.working, waiting: this.queue.length };
  }
}
