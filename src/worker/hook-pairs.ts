/**
 * Which extensions' `beforeRun` was called for a run, so that `afterRun` and `onError` pair
 * with it (hook-runner.ts; worker README, "Extensions"): an extension whose `beforeRun` was
 * never called for a run (the run was cancelled first) gets no `afterRun` or `onError` for it.
 * An extension without `beforeRun` gets them always. And which runs this worker called
 * `beforeRun` for and has not ended: a run handed back for capacity (contracts §15) and
 * continued here calls it again only when its first part ran on another worker.
 */
import type { Extension, RunContext } from "./extensions.js";

/**
 * The most runs remembered as begun here: a handed-back run continued by another worker (or
 * whose job failed) is never ended here, and its entry goes once this many came after it.
 */
export const MAX_RUNS_BEGUN = 10_000;

export class HookPairs {
  /** Runs whose `beforeRun` hooks this worker called and whose `afterRun` it has not, in order. */
  private readonly runsBegun = new Set<string>();

  /** Whether this worker called `beforeRun` for the run `runId` and has not ended it. */
  begunHere(runId: string): boolean {
    return this.runsBegun.has(runId);
  }

  /** The run `runId` ended here (its `afterRun` is called). */
  ended(runId: string): void {
    this.runsBegun.delete(runId);
  }

  /** The extensions whose `beforeRun` was called, by the run's hooks' context. */
  private readonly begun = new WeakMap<RunContext, Set<Extension>>();

  /** A run's `beforeRun` calls start: add each extension to the set before its hook is called. */
  starting(ctx: RunContext): Set<Extension> {
    this.runsBegun.delete(ctx.runId);
    this.runsBegun.add(ctx.runId);
    if (this.runsBegun.size > MAX_RUNS_BEGUN)
      this.runsBegun.delete(this.runsBegun.values().next().value as string);
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
