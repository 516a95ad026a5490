/**
 * An API process's subscription to the event-write notifications (events.ts
 * `eventsNotifyChannel`: writers publish a stream's key after each write), held only while a
 * reader of this process waits on it. Before, the first reader subscribed the process for
 * good, so every API process that had ever served one received every session's writes.
 *
 * The subscribes and unsubscribes run one after another, each bringing the connection to
 * what the count of readers asks for when it runs. A reader that arrives while the last
 * one's unsubscribe is in flight waits for it and for the subscribe queued after it: it
 * starts reading only once the subscription holds, so no write after its first read goes
 * unnoticed (a reader reads after its place on every wake, so a wake is all it needs).
 */
import type { Redis } from "ioredis";

export type NotifySubscriptionDeps = {
  /** The connection of its own that SUBSCRIBE needs, made at the first reader. */
  connect: () => Redis;
  channel: string;
  /** A stream's key was written to. */
  onMessage: (key: string) => void;
};

export class NotifySubscription {
  private readers = 0;
  private subscribed = false;
  private connection: Redis | null = null;
  /** The last subscribe or unsubscribe asked for; the next one starts after it. */
  private queue: Promise<void> = Promise.resolve();
  private closed = false;

  constructor(private readonly deps: NotifySubscriptionDeps) {}

  /**
   * Counts a reader in and resolves once the subscription holds; answers how to count it
   * out (the last one out unsubscribes; `onError`: told if that fails). On failure the
   * reader is not counted.
   */
  async acquire(): Promise<(onError?: (error: unknown) => void) => void> {
    this.readers++;
    let released = false;
    const release = (onError?: (error: unknown) => void) => {
      if (released) return;
      released = true;
      this.readers--;
      if (this.readers === 0) this.settle().catch((error: unknown) => onError?.(error));
    };
    try {
      await this.settle();
    } catch (error) {
      release();
      throw error;
    }
    return release;
  }

  /** Whether Redis is told to send this process the notifications (for tests and checks). */
  get holds(): boolean {
    return this.subscribed;
  }

  /** Ends the connection (the API is stopping); nothing subscribes after. */
  close(): void {
    this.closed = true;
    this.connection?.disconnect();
  }

  private settle(): Promise<void> {
    const step = this.queue.then(() => this.apply());
    this.queue = step.catch(() => {});
    return step;
  }

  private async apply(): Promise<void> {
    if (this.closed) return;
    if (this.readers > 0 && !this.subscribed) {
      await this.connectionFor().subscribe(this.deps.channel);
      this.subscribed = true;
    } else if (this.readers === 0 && this.subscribed && this.connection) {
      // Failed or not, the next reader subscribes anew (a second SUBSCRIBE changes nothing):
      // a reader must never count on a subscription that may be gone.
      try {
        await this.connection.unsubscribe(this.deps.channel);
      } finally {
        this.subscribed = false;
      }
    }
  }

  private connectionFor(): Redis {
    if (!this.connection) {
      const connection = this.deps.connect();
      connection.on("message", (_channel: string, key: string) => this.deps.onMessage(key));
      this.connection = connection;
    }
    return this.connection;
  }
}
