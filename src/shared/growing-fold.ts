/**
 * A left fold kept with an array that only grows, so that asking again after a push costs only
 * the items pushed since, not the whole array (the worker's histories: run-state.ts,
 * agent-loop.ts). A history of 50,000 messages is asked about at every append and model call.
 *
 * The fold kept is trusted only while the array still holds, at the place the fold stopped,
 * the very item it stopped at (and is no shorter): an array that was cut, or whose end was
 * replaced, is folded again from its start.
 */
export class GrowingFold<T, S> {
  /** The sum of `weigh` over the items, kept as a GrowingFold (added in the items' order). */
  static sumOf<T>(weigh: (item: T) => number): GrowingFold<T, number> {
    return new GrowingFold<T, number>(
      () => 0,
      (sum, items, from) => {
        let total = sum;
        for (let i = from; i < items.length; i++) total += weigh(items[i]!);
        return total;
      },
    );
  }

  private readonly kept = new WeakMap<readonly T[], { state: S; length: number; last: T | undefined }>();

  /**
   * `start`: the state of an empty array. `extend`: the state after `items[from..]`, given the
   * state of `items[..from]` (it may change and return that state, or return a new one).
   */
  constructor(
    private readonly start: () => S,
    private readonly extend: (state: S, items: readonly T[], from: number) => S,
  ) {}

  /** The fold of `items` as they are now (kept for the next question). */
  of(items: readonly T[]): S {
    let fold = this.kept.get(items);
    if (!fold || items.length < fold.length || (fold.length > 0 && items[fold.length - 1] !== fold.last)) {
      fold = { state: this.start(), length: 0, last: undefined };
      this.kept.set(items, fold);
    }
    if (fold.length < items.length) {
      fold.state = this.extend(fold.state, items, fold.length);
      fold.length = items.length;
      fold.last = items[items.length - 1];
    }
    return fold.state;
  }
}
