/**
 * Long histories a worker's jobs leave behind, kept for the session's next job on this
 * worker (FLEET_HISTORY_CACHE_MB): its claim then reads only what was stored after the kept
 * history (history-reads.ts `readClaimedHistory`, which checks that it still holds) instead
 * of the whole history. Each message a user sends is a run, and usually a job, of its own:
 * at 50,000 messages, reading the history again took a quarter of a second of the worker's
 * CPU per message, and counting its tokens (usage.ts) and walking its pairs (history-tail.ts)
 * again more; both are kept with the array, so a kept history keeps them too.
 *
 * Only histories longer than INLINE_HISTORY_MAX are kept (shorter ones come with the claim's
 * own statement). A history is taken out while a job uses it, so no two jobs ever share one
 * array, and put back when the job ends; the least recently put back go first once the
 * histories' estimated size passes the bound. A worker that is not the one to take the
 * session's next job only holds memory: with N workers, a session's next job finds its
 * history here about 1 time in N.
 */
import { GrowingFold } from "../shared/growing-fold.js";
import type { StoredMessage } from "../shared/messages.js";
import { INLINE_HISTORY_MAX } from "../shared/store/history-reads.js";

/** Bytes counted per message besides its texts (the object, its seq and createdAt). */
export const MESSAGE_BYTES = 300;

/**
 * An estimate of a message's bytes in memory (pure): its text, its tool calls and provider
 * state as JSON, and MESSAGE_BYTES.
 */
export function messageBytes(message: StoredMessage): number {
  let bytes = MESSAGE_BYTES + message.content.length;
  if (message.role === "assistant") {
    if (message.toolCalls) bytes += JSON.stringify(message.toolCalls).length;
    if (message.providerState) bytes += JSON.stringify(message.providerState).length;
  }
  return bytes;
}

type Kept = { history: StoredMessage[]; bytes: number };

/** The estimate of each array's size, extended by what was pushed since (growing-fold.ts). */
const weighed = GrowingFold.sumOf<StoredMessage>(messageBytes);

export class HistoryCache {
  /** In the order they were put back: the first is the next to go. */
  private readonly kept = new Map<string, Kept>();
  private bytes = 0;

  constructor(private readonly maxBytes: number) {}

  /** The session's kept history, taken out (the caller owns it until it puts it back). */
  take(sessionId: string): StoredMessage[] | undefined {
    const kept = this.kept.get(sessionId);
    if (!kept) return undefined;
    this.kept.delete(sessionId);
    this.bytes -= kept.bytes;
    return kept.history;
  }

  /**
   * Keeps `history` for the session's next job: the stored messages from seq 1 on, as the job
   * that read and appended them holds them (nothing but committed messages pushed onto it).
   */
  put(sessionId: string, history: StoredMessage[]): void {
    this.take(sessionId);
    if (history.length <= INLINE_HISTORY_MAX) return;
    const bytes = weighed.of(history);
    if (bytes > this.maxBytes) return;
    this.kept.set(sessionId, { history, bytes });
    this.bytes += bytes;
    for (const [id, kept] of this.kept) {
      if (this.bytes <= this.maxBytes) break;
      this.kept.delete(id);
      this.bytes -= kept.bytes;
    }
  }

  /** Sessions kept, and their estimated bytes (for tests and metrics). */
  get size(): { sessions: number; bytes: number } {
    return { sessions: this.kept.size, bytes: this.bytes };
  }
}
