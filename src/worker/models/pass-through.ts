/**
 * A model's stream seen through a wrapper that only watches it: each event is passed on as
 * it comes (after `onEvent`), and a failure is passed on after `onError`. Used by the
 * wrappers every run's model goes through (the provider error log, the text deltas).
 *
 * A plain async iterator, not an `async *` generator: a generator layer that re-yields each
 * event costs its own promises and a few microtask turns per event (its `next`, the `await` of
 * the inner `next`, the `yield`), two such layers sat on every model call, and a real
 * provider's answer streams hundreds of events. Here an event costs one `then` per layer.
 * What a generator layer did is kept: the inner stream is opened at the first `next()`, and
 * `return()` (a consumer leaving its `for await` early) reaches the inner stream, whose
 * `finally` blocks run.
 */
import type { ModelEvent } from "./provider.js";

export type StreamWatch = {
  /** Told of each event before it is passed on. */
  onEvent?: (event: ModelEvent) => void;
  /** Told of the stream's failure (opening it, reading it, or closing it early) before it is passed on. */
  onError?: (error: unknown) => void;
};

export function passThrough(
  open: () => AsyncIterable<ModelEvent>,
  watch: StreamWatch,
): AsyncIterableIterator<ModelEvent> {
  return new PassThrough(open, watch);
}

const DONE: IteratorReturnResult<undefined> = Object.freeze({ done: true, value: undefined });

class PassThrough implements AsyncIterableIterator<ModelEvent> {
  private inner: AsyncIterator<ModelEvent> | null = null;
  private finished = false;

  constructor(
    private readonly open: () => AsyncIterable<ModelEvent>,
    private readonly watch: StreamWatch,
  ) {}

  [Symbol.asyncIterator](): AsyncIterableIterator<ModelEvent> {
    return this;
  }

  next(): Promise<IteratorResult<ModelEvent>> {
    if (this.finished) return Promise.resolve(DONE);
    let inner = this.inner;
    if (inner === null) {
      try {
        inner = this.inner = this.open()[Symbol.asyncIterator]();
      } catch (error) {
        return this.fail(error);
      }
    }
    return inner.next().then(
      (result) => this.passed(result),
      (error: unknown) => this.fail(error),
    );
  }

  return(value?: unknown): Promise<IteratorResult<ModelEvent>> {
    const inner = this.inner;
    const open = !this.finished;
    this.finished = true;
    if (!open || inner === null || !inner.return) return Promise.resolve({ done: true, value });
    return inner.return(value).then(
      () => ({ done: true, value }),
      (error: unknown) => this.fail(error),
    );
  }

  throw(error?: unknown): Promise<IteratorResult<ModelEvent>> {
    const inner = this.inner;
    const open = !this.finished;
    this.finished = true;
    if (!open || inner === null || !inner.throw) return Promise.reject(error);
    return inner.throw(error).then(
      () => DONE,
      (thrown: unknown) => this.fail(thrown),
    );
  }

  private passed(result: IteratorResult<ModelEvent>): IteratorResult<ModelEvent> {
    if (result.done) {
      this.finished = true;
      return DONE;
    }
    const onEvent = this.watch.onEvent;
    if (onEvent) {
      try {
        onEvent(result.value);
      } catch (error) {
        // As a generator layer whose body threw: the inner stream is closed, the error passed on.
        this.finished = true;
        void this.inner?.return?.()?.catch(() => {});
        this.watch.onError?.(error);
        throw error;
      }
    }
    return result;
  }

  private fail(error: unknown): Promise<never> {
    this.finished = true;
    this.watch.onError?.(error);
    return Promise.reject(error);
  }
}
