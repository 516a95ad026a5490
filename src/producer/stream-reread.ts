/**
 * What the client's bounded streams — `stream()`/`streamResume()` (one run's events) and
 * `batchEvents()` — do when their own reconnect, with the last id they received, is answered
 * `410`: their place is gone from a stream that was written anew (Redis restarted or failed
 * over without its data, a stream that expired whole, Postgres restored: contracts §7). The run
 * or batch goes on regardless, and they promise its end (`RUN_COMPLETED`, `BATCH_COMPLETED`),
 * so they read the stream again from its start (`?run=`, or the batch's first event) and leave
 * out what they had yielded: a message by its `seq`, a tool call's start and finish by its
 * step and id, a run's start and end, a parking by the run's end before it (or the run of the last
 * event read, for one written before its run's end), a batch session's
 * end by its session, and anything of a run whose end they yielded (a re-read then starts at
 * the latest run). Events the new stream never holds twice (its live ones) pass.
 * `events()` without an `after` (session-follow.ts) and `fleet watch` (commands/watch.ts) do
 * the same. `rereadStep()` is that step, one per reader (pure: no I/O).
 */
import type { FleetEvent, FleetEventType, KnownFleetEvent } from "../shared/api-events.js";
import { FleetApiError } from "./client-errors.js";

/** Whether `error` is the API's answer that a reader's place is no longer in the stream. */
export function placeGone(error: unknown): boolean {
  return error instanceof FleetApiError && error.status === 410;
}

/**
 * What a stream has yielded, as far as a re-read from its start could bring it again: the
 * messages up to `maxSeq` (`firstSeq`: the first yielded, 0 while none is), and per run (""
 * for events of none: a batch's) the keys of the other events yielded and `steps`, each tool
 * call id's step: the seq of the last assistant message read that made a call under it (a
 * re-read brings those messages again, in the same order). `ended`: the run whose end was
 * read last since a run's start was read ("" for none); `current`: the run the last event
 * read that names one is of ("" for none).
 */
type Yielded = { maxSeq: number; firstSeq: number; runs: Map<string, Seen>; ended: string; current: string };
type Seen = { keys: Set<string>; steps: Map<string, number> };

function nothingYielded(): Yielded {
  return { maxSeq: 0, firstSeq: 0, runs: new Map(), ended: "", current: "" };
}

/**
 * The run `event` is of; a parking's, the run its data names (an API of this release names the
 * run whose end parked the session), else the run whose end came just before it (a run's end
 * that parks the session is followed by SESSION_PARKED, in the same write), else the run of
 * the last event read. The sweeper writes a parking without a run's end before
 * it when it parks a session whose run's end it could not write (Redis failed that write): the
 * repair of the lost end (event-writer.ts missingRunEnd) writes it after the parking. That
 * parking was known by no run, and a re-read after a 410 yielded it again.
 */
function runOf(yielded: Yielded, event: FleetEvent): string {
  const runId = (event.data as { runId?: unknown }).runId;
  if (event.type === "SESSION_PARKED")
    return typeof runId === "string" && runId !== "" ? runId : yielded.ended || yielded.current;
  return typeof runId === "string" ? runId : "";
}

/** What was yielded of `event`'s run. */
function seenOf(yielded: Yielded, event: FleetEvent): Seen {
  const run = runOf(yielded, event);
  let seen = yielded.runs.get(run);
  if (!seen) {
    seen = { keys: new Set(), steps: new Map() };
    yielded.runs.set(run, seen);
  }
  return seen;
}

const KNOWN: Record<FleetEventType, true> = {
  RUN_STARTED: true,
  MESSAGE_DELTA: true,
  MESSAGE: true,
  TOOL_STARTED: true,
  TOOL_FINISHED: true,
  MODEL_STOPPED: true,
  RUN_COMPLETED: true,
  SESSION_PARKED: true,
  SESSION_DELETED: true,
  SESSION_ENDED: true,
  BATCH_COMPLETED: true,
  BATCH_DELETED: true,
};

function known(event: FleetEvent): event is KnownFleetEvent {
  return Object.hasOwn(KNOWN, event.type);
}

/**
 * The key an event is known by once yielded, when a stream written anew could hold it again;
 * null for one it holds once (a live event: a delta, a stop, a stream's end). A tool
 * call's by its step and its id (toolKey).
 */
function repeatKey(seen: Seen, event: KnownFleetEvent): string | null {
  switch (event.type) {
    case "RUN_STARTED":
      return `run:${event.data.runId}`;
    case "TOOL_STARTED":
    case "TOOL_FINISHED":
      return toolKey(event.type, seen.steps.get(event.data.toolCallId), event.data.toolCallId);
    case "SESSION_ENDED":
      return `ended:${event.data.sessionId}`;
    // The API writes an ended run's end again into a stream written anew (its repair of a
    // lost one, event-writer.ts missingRunEnd) that a re-read begun at the stream's start
    // (no run's start in it) reads: it was yielded twice.
    case "RUN_COMPLETED":
      return `done:${event.data.runId}`;
    // Written again with that end: known as the parking of the run whose end it follows (one
    // per parking: a session parks again only after a run of its own).
    case "SESSION_PARKED":
      return `parked:${event.data.reason}`;
    case "MESSAGE":
    case "MESSAGE_DELTA":
    case "MODEL_STOPPED":
    case "SESSION_DELETED":
    case "BATCH_COMPLETED":
    case "BATCH_DELETED":
      return null;
  }
}

/**
 * Whether `event`, read again after a 410, is a message past the one after the last yielded:
 * messages between went with the old stream and are not in the new one (a reader so slow that
 * its place was trimmed away, rather than a stream written anew from Postgres, which holds
 * every stored message). The re-read then rejects with that 410, as before, not skip them.
 */
function messageGap(yielded: Yielded, event: FleetEvent): boolean {
  if (event.type !== "MESSAGE" || yielded.maxSeq === 0) return false;
  const seq = Number((event.data.message as { seq?: unknown } | undefined)?.seq);
  return Number.isFinite(seq) && seq > yielded.maxSeq + 1;
}

/**
 * Whether `event` was yielded already (a re-read brought it again); when not, it is noted in
 * `yielded` as yielded now.
 */
function yieldedBefore(yielded: Yielded, event: FleetEvent): boolean {
  if (!known(event)) return false;
  const named = (event.data as { runId?: unknown }).runId;
  if (typeof named === "string" && named !== "") yielded.current = named;
  // Nothing of a run follows its end or its parking but those two (keyed below): once either
  // was yielded, a re-read's events of it (its stored messages written anew, its start) were
  // yielded, or came before the read began. A reader that began past a run's messages (`fleet
  // watch --after`, a stream with no RUN_STARTED) knew no seq of them: they came as new. (Its
  // end, after a parking the sweeper wrote before it, may be new: it is known by its key.)
  if (event.type !== "SESSION_PARKED" && event.type !== "RUN_COMPLETED" && overYielded(yielded, event)) {
    if (event.type === "MESSAGE") {
      const seq = Number((event.data.message as { seq?: unknown }).seq);
      if (Number.isFinite(seq)) yielded.maxSeq = Math.max(yielded.maxSeq, seq);
    }
    return true;
  }
  if (event.type === "MESSAGE") {
    const seq = Number((event.data.message as { seq?: unknown }).seq);
    if (!Number.isFinite(seq)) return false;
    noteStep(seenOf(yielded, event), event.data.message, seq);
    if (seq <= yielded.maxSeq) return true;
    yielded.maxSeq = seq;
    if (yielded.firstSeq === 0) yielded.firstSeq = seq;
    return false;
  }
  if (event.type === "RUN_STARTED") yielded.ended = "";
  if (event.type === "RUN_COMPLETED") yielded.ended = runOf(yielded, event);
  // A parking read before any event that names a run is not known by any.
  if (event.type === "SESSION_PARKED" && runOf(yielded, event) === "") return false;
  const seen = seenOf(yielded, event);
  const key = repeatKey(seen, event);
  if (key === null) return false;
  if (seen.keys.has(key) || yieldedWithoutStep(yielded.firstSeq, seen, event)) return true;
  seen.keys.add(key);
  // A new run: a re-read starts at the latest run's RUN_STARTED (stream-places.ts), never
  // before, so what was yielded of earlier runs cannot come again. Forgotten: a reader
  // following a session for days held a key for every run and tool call it had ever seen.
  if (event.type === "RUN_STARTED")
    for (const run of yielded.runs.keys())
      if (run !== "" && run !== event.data.runId) yielded.runs.delete(run);
  return false;
}

/** Whether the RUN_COMPLETED or the parking of the run `event` is of was yielded. */
function overYielded(yielded: Yielded, event: FleetEvent): boolean {
  const run = runOf(yielded, event);
  if (run === "") return false;
  const keys = yielded.runs.get(run)?.keys;
  if (!keys) return false;
  if (keys.has(`done:${run}`)) return true;
  for (const key of keys) if (key.startsWith("parked:")) return true;
  return false;
}

function hasEnd(yielded: Yielded, run: string): boolean {
  return yielded.runs.get(run)?.keys.has(`done:${run}`) === true;
}

/**
 * A tool call's key: its step and its id. Ids are distinct within a step only (a server that
 * sends none has each step's first call named `call_0`: step-message.ts); keyed by its id
 * alone, a later step's call was taken for one yielded already and left out, re-read or not.
 * The step is not known for a call whose assistant message came before the read began.
 */
function toolKey(type: string, step: number | undefined, id: string): string {
  return `${type}:${step ?? "?"}:${id}`;
}

/**
 * Whether `event`, a tool call's, of a step before the first message yielded, was yielded
 * without its step: the read began after that step's assistant message (`fleet watch --after`
 * an id within the step), and a re-read from further back brings the message and the event.
 */
function yieldedWithoutStep(firstSeq: number, seen: Seen, event: KnownFleetEvent): boolean {
  if (event.type !== "TOOL_STARTED" && event.type !== "TOOL_FINISHED") return false;
  const step = seen.steps.get(event.data.toolCallId);
  return (
    step !== undefined &&
    step < firstSeq &&
    seen.keys.has(toolKey(event.type, undefined, event.data.toolCallId))
  );
}

/** The step of each call an assistant message makes (a re-read's too: it is the same step). */
function noteStep(seen: Seen, message: unknown, seq: number): void {
  const calls = (message as { toolCalls?: unknown } | undefined)?.toolCalls;
  if (!Array.isArray(calls)) return;
  for (const call of calls) {
    const id = (call as { id?: unknown } | null)?.id;
    if (typeof id === "string") seen.steps.set(id, seq);
  }
}

/** One reader's step through the events it reads, across the re-reads that follow a 410. */
export type RereadStep = {
  /**
   * Whether to yield `event`: false for one yielded already (a re-read brought it again), else
   * it is noted as yielded now. While a 410 is followed, a message past the one after the last
   * yielded throws that 410 (the messages between are in no stream any more: a place trimmed
   * away); the re-read's first new message ends the following.
   */
  pass(event: FleetEvent): boolean;
  /** Notes `event` as yielded, skipping nothing (a read that cannot bring an event twice). */
  note(event: FleetEvent): void;
  /**
   * Whether the reader reads again from the start after `error`: a 410 (placeGone), not the one
   * `pass` threw on a gap. When so, it is the 410 followed from now on.
   */
  follow(error: unknown): boolean;
  /**
   * Whether `run`'s RUN_COMPLETED was yielded: a re-read then starts at the latest run, not at
   * that run's start (none of it is new).
   */
  ended(run: string): boolean;
  /** How many events it holds to know them again (keys and tool call steps; for tests). */
  held(): number;
};

export function rereadStep(): RereadStep {
  const yielded = nothingYielded();
  // The 410 a re-read follows (until its first new message), thrown on a gap.
  let followed: unknown;
  return {
    pass(event) {
      if (followed !== undefined && messageGap(yielded, event)) throw followed;
      if (yieldedBefore(yielded, event)) return false;
      if (event.type === "MESSAGE") followed = undefined;
      return true;
    },
    note(event) {
      yieldedBefore(yielded, event);
    },
    ended(run) {
      return hasEnd(yielded, run);
    },
    held() {
      let held = 0;
      for (const seen of yielded.runs.values()) held += seen.keys.size + seen.steps.size;
      return held;
    },
    follow(error) {
      if (!placeGone(error) || error === followed) return false;
      followed = error;
      return true;
    },
  };
}
