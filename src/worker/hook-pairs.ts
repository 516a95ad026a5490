/**
 * Which extensions' `beforeRun` was called for a run, so that `afterRun` and `onError` pair
 * with it (hook-runner.ts; worker README, "Extensions"): an extension whose `beforeRun` was
 * never called for a run (the run was cancelled first) gets no `afterRun` or `onError` for it.
 * An extension without `beforeRun` gets them always.
 */
import type { Extension, RunContext } from "./extensions.js";

export class HookPairs {
  /** The extensions whose `beforeRun` was called, by the run's hooks' context. */
  private readonly begun = new WeakMap<RunContext, Set<Extension>>();

  /** A run's `beforeRun` calls start: add each extension to the set before its hook is called. */
  starting(ctx: RunContext): Set<Extension> {
    const begun = new Set<Extension>();
    this.begun.set(ctx, begun);
    return begun;
  }

  /** Every `beforeRun` was called in an earlier part of the run (handed back, contracts §15). */
  continued(ctx: RunContext, all: readonly Extension[]): void {
    this.begun.set(ctx, new Set(all));
  }

  /**
   * Whether `extension` is owed `afterRun` and `onError` for `ctx`'s run: it has no
   * `beforeRun`, or its `beforeRun` was called. A context no `beforeRun` call was started for
   * (hooks called directly) owes them to every extension.
   */
  owed(ctx: RunContext, extension: Extension): boolean {
    const begun = this.begun.get(ctx);
    return !extension.beforeRun || !begun || begun.has(extension);
  }
}
