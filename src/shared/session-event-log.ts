import type { EventWriter } from "./event-writer.js";
import type { SessionEventInput } from "./events.js";
import type { StoredMessage } from "./messages.js";

/**
 * The events of one session as one worker job writes them: every write first carries the
 * stored messages of `history` the stream does not have yet (up to `through`, when given).
 * Writes go out one after the other, in the order they were asked for: what is asked for
 * while a write is on its way (or in the same turn of the event loop) goes out together in
 * the next one. A failed write (Redis away) is logged and its messages go with the next
 * one; it never stops the run. Text deltas are coalesced for up to DELTA_FLUSH_MS (best
 * effort, contracts §7).
 */
export class SessionEventLog {
  private chain: Promise<void> = Promise.resolve();
  /** What the next write carries, in order: for each part, the messages up to `through`, then its events. */
  private queued: { through: number; events: SessionEventInput[] }[] = [];
  /** The next write, while it is still gathering parts. */
  private next: Promise<void> | null = null;
  private deltas: { runId: string; text: string } | null = null;
  /**
   * The runs of earlier jobs' messages, read from Postgres (findRuns), and the seqs asked for:
   * made at the first lookup (a job that committed every message it sends never makes one).
   */
  private foundRuns: Map<number, string> | null = null;
  private askedRuns: Set<number> | null = null;
  private deltaTimer: NodeJS.Timeout | null = null;

  constructor(
    private readonly writer: EventWriter,
    readonly sessionId: string,
    /** The job's history (stored messages), kept current by the job. */
    private readonly history: readonly StoredMessage[],
    /** Which run committed a message (null when not known: an earlier job's, or imported). */
    private readonly runOf: (message: StoredMessage) => string | null,
    private readonly onError: (error: unknown) => void,
    /** The highest message seq known to be in the stream (null: read it from Redis first). */
    private sent: number | null = null,
    /**
     * Whether the session has its stream (`sessionEvents`) as the job last learnt it: off, every
     * emit and delta is a no-op. `setOn` follows PATCH /v1/sessions/:id while the job runs.
     */
    private on = true,
  ) {}

  get enabled(): boolean {
    return this.writer.enabled;
  }

  /**
   * The session's `sessionEvents` as an append just read it. Turned on, the next write first
   * reads what the stream has (the API wrote the stored messages into it) and sends the rest;
   * turned off, nothing more is written and text not yet sent is dropped.
   */
  setOn(on: boolean): void {
    if (on === this.on) return;
    this.on = on;
    if (on) this.sent = null;
    else this.takeDeltas();
  }

  /**
   * Writes the messages the stream lacks (those with seq ≤ `through`; by default, those in
   * the history now), then `events`.
   */
  emit(events: SessionEventInput[] = [], through?: number): Promise<void> {
    if (!this.writer.enabled || !this.on) return Promise.resolve();
    // The text streamed so far goes first, on its own: it belongs to the step whose message
    // was just committed, so it comes before that MESSAGE, not after it.
    const deltas = this.takeDeltas();
    if (deltas) void this.enqueue(0, [deltas]);
    return this.enqueue(through ?? this.history.at(-1)?.seq ?? 0, events);
  }

  /**
   * `emit`, waited for at most `timeoutMs`: the writes stay queued in order, but a run never
   * waits long for Redis (an outage must not hold a run that Postgres already ended).
   */
  emitBounded(events: SessionEventInput[] = [], through?: number, timeoutMs = 1_000): Promise<void> {
    if (!this.writer.enabled || !this.on) return Promise.resolve();
    const written = this.emit(events, through);
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, timeoutMs);
    });
    return Promise.race([written, late]).finally(() => clearTimeout(timer));
  }

  /**
   * Waits for every write asked for so far (answered, or failed and logged), at most
   * `timeoutMs`; asks for no write itself. What a job waits for before it gives up its lease
   * (session-job.ts): the next holder's events then come after these.
   */
  settled(timeoutMs = 1_000): Promise<void> {
    const written = this.chain;
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, timeoutMs);
    });
    return Promise.race([written, late]).finally(() => clearTimeout(timer));
  }

  /** A text delta of the model's current step (not awaited by the caller). */
  delta(runId: string, text: string): void {
    if (!this.writer.enabled || !this.on || text === "") return;
    if (this.deltas && this.deltas.runId === runId) this.deltas.text += text;
    else {
      const earlier = this.takeDeltas();
      if (earlier) void this.enqueue(0, [earlier]);
      this.deltas = { runId, text };
    }
    this.deltaTimer ??= setTimeout(() => {
      this.deltaTimer = null;
      const pending = this.takeDeltas();
      if (pending) void this.enqueue(0, [pending]);
    }, DELTA_FLUSH_MS);
  }

  private enqueue(through: number, events: SessionEventInput[]): Promise<void> {
    this.queued.push({ through, events });
    this.next ??= this.chain = this.chain.then(() => {
      this.next = null;
      const parts = this.queued;
      this.queued = [];
      return this.write(parts);
    });
    return this.next;
  }

  /**
   * The runs of the messages about to be sent from `from` through seq `through` that this job
   * did not commit (an earlier job's, lost from the stream by a crash or a failed write), read
   * once from Postgres: their MESSAGE events carry their runId, not null (contracts §7).
   * Imported messages have none, and are asked for once. `unknownRuns` lists their seqs (null:
   * none), `findRuns` reads them.
   */
  private unknownRuns(from: number, through: number): number[] | null {
    let seqs: number[] | null = null;
    for (let i = from; i < this.history.length && this.history[i]!.seq <= through; i++) {
      const message = this.history[i]!;
      if (this.runOf(message) !== null || this.askedRuns?.has(message.seq)) continue;
      seqs ??= [];
      seqs.push(message.seq);
    }
    return seqs;
  }

  private async findRuns(seqs: readonly number[]): Promise<void> {
    // Postgres not answering does not hold the stream back: those go out without their run.
    const found = await this.writer.runsOf(this.sessionId, seqs).catch(() => new Map<number, string>());
    this.foundRuns ??= new Map();
    this.askedRuns ??= new Set();
    for (const [seq, runId] of found) this.foundRuns.set(seq, runId);
    for (const seq of seqs) this.askedRuns.add(seq);
  }

  /**
   * For a write through message `top` to a stream that holds none (the seq 0 read from Redis,
   * or a gap at 0): when more than the stream keeps would go in, starts it past the message
   * before its last FLEET_EVENTS_MAX (EventWriter.startAt), as a stream rebuilt from Postgres
   * starts, and returns that message's seq; else 0. A job whose stream expired between two runs
   * wrote every stored message before its run's first event (20,000 for a session of 20,000).
   */
  private async startAtTail(top: number): Promise<number> {
    const seq = this.writer.tailFloor(top);
    const floor = this.history[seq - 1];
    return floor?.seq === seq && (await this.writer.startAt(this.sessionId, floor)) ? seq : 0;
  }

  private takeDeltas(): SessionEventInput | null {
    if (this.deltaTimer) {
      clearTimeout(this.deltaTimer);
      this.deltaTimer = null;
    }
    const pending = this.deltas;
    this.deltas = null;
    return pending ? { type: "MESSAGE_DELTA", runId: pending.runId, text: pending.text } : null;
  }

  private async write(parts: readonly { through: number; events: SessionEventInput[] }[]): Promise<void> {
    try {
      // A seq read from the stream now is checked: its message must be the stored one.
      let checking = this.sent === null;
      this.sent ??= await this.writer.lastSeq(this.sessionId);
      // What the stream was believed to hold: should it have lost some of that (a gap), those
      // messages go before every part, also a part of text deltas (whose `through` is 0).
      const believed = this.sent;
      let dropped = false;
      let asked = believed;
      for (const part of parts) if (part.through > asked) asked = part.through;
      const top = Math.min(asked, this.history.at(-1)?.seq ?? 0);
      for (let attempt = 0; attempt < 3; attempt++) {
        // A stream Redis no longer has (expired, lost, dropped) starts at the messages it keeps.
        if (this.sent === 0) this.sent = await this.startAtTail(top);
        const entries: SessionEventInput[] = [];
        // The history is in seq order: the messages the stream lacks are its tail.
        let at = this.history.length;
        while (at > 0 && this.history[at - 1]!.seq > this.sent!) at--;
        // Almost always every message's run is known (this job committed it): then no lookup,
        // and no async call awaited for none.
        const unknown = this.unknownRuns(at, top);
        if (unknown) await this.findRuns(unknown);
        let lastSent = this.sent!;
        for (const part of parts) {
          const through = Math.max(part.through, believed);
          for (; at < this.history.length && this.history[at]!.seq <= through; at++) {
            const message = this.history[at]!;
            const runId = this.runOf(message) ?? this.foundRuns?.get(message.seq) ?? null;
            entries.push({ type: "MESSAGE", runId, message });
            lastSent = message.seq;
          }
          entries.push(...part.events);
        }
        const sent = this.sent!;
        // Every write says which message it believes the stream has last: a seq read from the
        // stream just now must be that stored message, and a stream that has lost it (Redis
        // lost the stream, or it expired) is a gap, filled before the write's events.
        // A stream past every message the job has stored checks the job's last one: the script
        // then sees a writer behind it, and skips a late start or end of a run (a job that
        // lost its lease, woken after later runs: APPEND_SCRIPT's `behind`).
        const newest = this.history.at(-1);
        const check =
          newest !== undefined && newest.seq < sent ? newest : sent > 0 ? this.history[sent - 1] : undefined;
        if (checking) checking = false;
        // What the job had stored when it wrote: the history grows while the write is on its
        // way (the next step commits), and compared with that, a stream holding lost messages
        // under the seqs just committed would look current.
        const stored = newest?.seq ?? 0;
        const result = await this.writer.writeEntries(
          this.sessionId,
          entries,
          check !== undefined && (check.seq === sent || check === newest) ? check : undefined,
        );
        // The stream had messages past every one this job has stored, or another message than
        // the stored one: while it holds the lease only a Postgres restored to an earlier point
        // does that (or this job lost its lease: Postgres, asked, says which). A dropped stream
        // is written again, from its tail (startAtTail).
        const stale =
          !dropped &&
          (result.ok
            ? result.prior > stored &&
              (await this.writer.dropIfStaleInStore(this.sessionId, result.prior, result.priorFingerprint))
            : result.diverged !== undefined &&
              (await this.writer.dropIfStaleInStore(this.sessionId, result.last, result.diverged)));
        if (stale) {
          dropped = true;
          this.sent = 0;
          continue;
        }
        if (result.ok) {
          this.sent = Math.max(sent, lastSent);
          return;
        }
        this.sent = result.last;
      }
    } catch (error) {
      this.sent = null;
      this.onError(error);
    }
  }
}

/** How long text deltas are gathered into one MESSAGE_DELTA. */
const DELTA_FLUSH_MS = 50;
