/**
 * The AbortSignal extensions' hooks are handed (contracts §8: `ctx.signal`, and
 * `onSessionDeleted`'s `signal`): one that follows the worker's own signal, whose listeners
 * cannot stop the process. Node reports a listener of an AbortSignal that throws (or an async
 * one that rejects) as an uncaught exception, and the worker's last resort then exits 70: a
 * hook's clean-up that failed at a cancel (`ctx.signal.addEventListener("abort", …)`, or
 * `ctx.signal.onabort = …`) stopped the whole worker, and every run it had was cut off. Here
 * each listener is wrapped: what it throws or rejects with is handed to `failed`, logged and
 * counted as its hook's failure (hook-runner.ts), and the abort goes on to the next listener.
 * A signal of its own, too: a hook that writes to it (`ctx.signal.addEventListener = …`)
 * changes nothing the worker listens to.
 *
 * One per run (hook-runner.ts `hookSignal`), let go at the run's end (`releaseGuarded`): its
 * link to the job's signal is removed, so what the run's hooks added goes with the run. A
 * job's signal is every run's of that job, and the runs shared one hook signal: every
 * listener a hook added stayed on it for the job's life, and a listener of a run that had
 * ended was called at a later run's cancel.
 */

/** `failed` gets what a listener threw; `calling` names the hook being called when it was added. */
type Guard<C> = {
  failed: (error: unknown, addedBy: C | undefined) => void;
  calling?: C;
  /** Removes the link to the source signal (`releaseGuarded`). */
  release: () => void;
};

const GUARDS = new WeakMap<AbortSignal, Guard<unknown>>();

type Add = Parameters<EventTarget["addEventListener"]>;
type Listener = NonNullable<Add[1]>;
type Wrapper = (this: unknown, event: Event) => void;

/**
 * A signal aborted when `source` is (with its reason), whose listeners' throws and rejections go
 * to `failed` with what `calling` said when the listener was added.
 */
export function guardedSignal<C>(
  source: AbortSignal,
  failed: (error: unknown, addedBy: C | undefined) => void,
): AbortSignal {
  const controller = new AbortController();
  const signal = controller.signal;
  const guard: Guard<C> = { failed, release: () => {} };
  GUARDS.set(signal, guard as Guard<unknown>);
  const wrappers = new WeakMap<object, Wrapper>();
  const wrapped = (listener: Listener): Wrapper => {
    let wrapper = wrappers.get(listener);
    if (!wrapper) {
      const addedBy = guard.calling;
      wrapper = function (this: unknown, event: Event) {
        try {
          const result: unknown =
            typeof listener === "function" ? listener.call(this, event) : listener.handleEvent(event);
          if (result && typeof (result as PromiseLike<unknown>).then === "function")
            (result as PromiseLike<unknown>).then(undefined, (error: unknown) =>
              guard.failed(error, addedBy),
            );
        } catch (error) {
          guard.failed(error, addedBy);
        }
      };
      wrappers.set(listener, wrapper);
    }
    return wrapper;
  };
  // Own properties over EventTarget's methods. Node's `onabort` setter adds its handler through
  // `this.addEventListener`, so a handler set that way is wrapped too.
  Object.defineProperties(signal, {
    addEventListener: {
      value: (type: Add[0], listener: Add[1], options?: Add[2]) =>
        EventTarget.prototype.addEventListener.call(
          signal,
          type,
          listener ? wrapped(listener) : listener,
          options,
        ),
    },
    removeEventListener: {
      value: (type: Add[0], listener: Add[1], options?: Parameters<EventTarget["removeEventListener"]>[2]) =>
        EventTarget.prototype.removeEventListener.call(
          signal,
          type,
          listener ? (wrappers.get(listener) ?? listener) : listener,
          options,
        ),
    },
  });
  if (source.aborted) controller.abort(source.reason);
  else {
    const follow = () => controller.abort(source.reason);
    source.addEventListener("abort", follow, { once: true });
    guard.release = () => source.removeEventListener("abort", follow);
  }
  return signal;
}

/**
 * Lets go of a guarded signal (its run ended): it no longer follows its source, so its
 * listeners are never called by a later abort of the source and go when the signal does.
 */
export function releaseGuarded(signal: AbortSignal | undefined): void {
  const guard = signal && GUARDS.get(signal);
  if (guard) {
    guard.release();
    guard.release = () => {};
  }
}

/** Says which hook is being called with `signal` (a guarded one; any other is left alone). */
export function callingWith<C>(signal: AbortSignal | undefined, calling: C): void {
  const guard = signal && GUARDS.get(signal);
  if (guard) guard.calling = calling;
}
