/**
 * Calls the loaded extensions' hooks (contracts §8; what they are: extensions.ts): each in
 * load order, each within FLEET_HOOK_TIMEOUT_MS, a failure logged and counted.
 */
import type { Logger } from "pino";
import type { FleetMetrics } from "../shared/metrics.js";
import { thrownText } from "../shared/thrown-text.js";
import type {
  CommittedMessage,
  DeletedContext,
  Extension,
  RunContext,
  RunError,
  RunResult,
} from "./extensions.js";
import { loggable } from "./hook-errors.js";
import { HookPairs } from "./hook-pairs.js";
import { callingWith, guardedSignal, releaseGuarded } from "./hook-signal.js";
import { frozenCopy, ownCopy } from "./hook-views.js";
import { isWorkerStop, waitForHook } from "./hook-wait.js";
import { tenantJobFailureText } from "./job-failure.js";
import { MAX_TIMER_MS } from "./tools/time-limit.js";

/**
 * Extensions whose `beforeRun` failure is logged and counted like any other hook's instead of
 * ending the run: the built-in transcript (transcriptExtension). Its resume record failed on a
 * file it could not write (a full disk, a lost mount), and every resume of the session then
 * ended `failed` until the session was parked, though its lines are documented as lost then.
 */
const RECORD_ONLY = new WeakSet<Extension>();

/** Marks `extension` as one whose `beforeRun` is a record, not a gate (see RECORD_ONLY). */
export function recordOnly<E extends Extension>(extension: E): E {
  RECORD_ONLY.add(extension);
  return extension;
}

/** The hook being called with a signal (hook-signal.ts), for a listener it adds. */
type Calling = { hook: string; extension: Extension };

/** Runs the loaded extensions' hooks, in load order. */
export class Extensions {
  constructor(
    readonly list: readonly Extension[],
    private readonly metrics: Pick<FleetMetrics, "hookFailures">,
    private readonly log: Pick<Logger, "warn">,
    /** FLEET_HOOK_TIMEOUT_MS: a hook still pending after this has failed (the run goes on). */
    timeoutMs = 30_000,
  ) {
    // A longer timer fires after 1 ms (Node): every hook would fail at once.
    this.timeoutMs = Math.min(timeoutMs, MAX_TIMER_MS);
  }

  private readonly timeoutMs: number;

  /** Calls one hook and waits for it within `timeoutMs` (hook-wait.ts). */
  private call(
    hook: string,
    extension: Extension,
    run: () => unknown,
    abort?: AbortSignal,
    stopsWaiting?: (reason: unknown) => boolean,
  ): Promise<void> {
    return waitForHook(
      { hook, extension: extension.name, timeoutMs: this.timeoutMs },
      run,
      abort,
      stopsWaiting,
    );
  }

  /**
   * The signal hooks are handed in place of `source` (hook-signal.ts): one whose listeners'
   * throws are this hook's failure, logged and counted, instead of the worker's uncaught
   * exception (it exited 70 at a cancel, every run on it cut off). One per run, given back
   * with `releaseSignal` at the run's end: its link to `source` (the job's signal, every run's
   * of that job) goes then, and what the run's hooks added to it goes with the run.
   */
  hookSignal(source: AbortSignal, where: { sessionId: string; runId?: string }): AbortSignal {
    return guardedSignal<Calling>(source, (error, addedBy) => {
      if (addedBy) this.failed(addedBy.hook, addedBy.extension, where, error);
    });
  }

  /** Lets go of a signal `hookSignal` made (its run ended): a later abort of its source does not reach it. */
  releaseSignal(signal: AbortSignal | undefined): void {
    releaseGuarded(signal);
  }

  get empty(): boolean {
    return this.list.length === 0;
  }

  private failed(
    hook: string,
    extension: Extension,
    ctx: { sessionId: string; runId?: string },
    error: unknown,
  ): void {
    this.metrics.hookFailures.inc({ hook });
    const fields = { extension: extension.name, hook, sessionId: ctx.sessionId, runId: ctx.runId };
    try {
      this.log.warn({ err: loggable(error), ...fields }, "extension hook failed");
    } catch {
      // A value the logger cannot read (a getter that throws, a revoked proxy): pino's throw
      // escaped the hook runner, and the run's append or end failed with it. Its text instead.
      this.log.warn({ err: { message: thrownText(error) }, ...fields }, "extension hook failed");
    }
  }

  /**
   * The message of the first `beforeRun` that threw (the run then ends `failed`), or null.
   * The later extensions' `beforeRun` still runs: each extension's `afterRun` pairs with its
   * own `beforeRun` (worker README, "Extensions"), and each hears of the failed run. A run
   * aborted meanwhile (a cancel, the worker stopping) stops waiting for its hook and calls no
   * more: it ends `cancelled` without calling the model, and the extensions whose `beforeRun`
   * was not called get no `afterRun` or `onError` for it (`begun`). Before, a cancel waited out
   * the hook's FLEET_HOOK_TIMEOUT_MS and the run then ended `failed`, with `onError`.
   */
  async beforeRun(ctx: RunContext): Promise<string | null> {
    const begun = this.pairs.starting(ctx);
    let refusal: string | null = null;
    for (const extension of this.list) {
      if (!extension.beforeRun) continue;
      // An earlier refusal stays the run's end (a cancel committed meanwhile makes it `cancelled`).
      if (ctx.signal?.aborted) return refusal;
      const abort = RECORD_ONLY.has(extension) ? undefined : ctx.signal;
      callingWith<Calling>(ctx.signal, { hook: "beforeRun", extension });
      begun.add(extension);
      try {
        await this.call("beforeRun", extension, () => extension.beforeRun!(ctx), abort);
      } catch (error) {
        if (abort?.aborted) return refusal;
        this.failed("beforeRun", extension, ctx, error);
        if (RECORD_ONLY.has(extension) || refusal !== null) continue;
        // The run's error, which its tenant reads: clipped like a provider's error (a hook may
        // throw a whole error page it was answered), and scrubbed as a job's failure is — the
        // keys it quotes, the worker's paths and addresses it names. It was stored as thrown.
        refusal = `beforeRun hook of extension "${extension.name}" failed: ${tenantJobFailureText(error, process.env)}`;
      }
    }
    return refusal;
  }

  /** Whose `beforeRun` was called for a run: `afterRun` and `onError` pair with it. */
  private readonly pairs = new HookPairs();

  /** Whether a handed-back run's earlier part called `beforeRun` here (then its `afterRun` is owed to all). */
  continuedHere(ctx: RunContext): boolean {
    if (!this.pairs.begunHere(ctx.runId)) return false;
    this.pairs.continued(ctx, this.list);
    return true;
  }

  /**
   * Each extension's `hook`, in load order. `onAbort` says what a run aborted meanwhile (a
   * cancel, the worker stopping) does: `wait` for the hooks all the same (a run's end, which
   * has been written already) — but not once the worker's stop is past its grace period
   * (WORKER_STOP_REASON): then a pending hook finishes on its own and the later ones are called
   * without being waited for, as `leave` (before, the stop waited for a pending `afterRun` until
   * its own bounded wait ran out, 11 s on, and closed its connections under the job); `stop` waiting for a pending one and call no more (a hook before
   * the run's first model call); `leave` a pending one to finish on its own and call the later
   * ones without waiting for them (`onCommitted`: each message the run commits still reaches
   * the hooks, but the cancel no longer waits out a slow one). Either way the built-in
   * transcript is waited for: its lines go in order, its record before them.
   */
  private async each(
    hook: Exclude<keyof Extension, "name">,
    ctx: RunContext,
    /** The hook's arguments after `ctx`; a function gives each extension its own. */
    args: unknown[] | (() => unknown[]),
    onAbort: "wait" | "stop" | "leave" = "wait",
  ) {
    const signal = ctx.signal;
    // Waited for whatever aborted the run, but for the worker's stop past its grace.
    const stopsWaiting = onAbort === "wait" ? isWorkerStop : undefined;
    const paired = hook === "afterRun" || hook === "onError";
    for (const extension of this.list) {
      const fn = extension[hook] as ((...a: unknown[]) => unknown) | undefined;
      if (!fn || (paired && !this.pairs.owed(ctx, extension))) continue;
      if (signal?.aborted && onAbort === "stop") return;
      const abort = RECORD_ONLY.has(extension) ? undefined : signal;
      callingWith<Calling>(ctx.signal, { hook, extension });
      try {
        const own = typeof args === "function" ? args() : args;
        await this.call(hook, extension, () => fn.call(extension, ctx, ...own), abort, stopsWaiting);
      } catch (error) {
        if (abort?.aborted && (!stopsWaiting || stopsWaiting(abort.reason))) {
          if (onAbort === "stop") return;
          continue;
        }
        this.failed(hook, extension, ctx, error);
      }
    }
  }

  onMessage(ctx: RunContext, input: string): Promise<void> {
    return this.each("onMessage", ctx, [input], "stop");
  }
  afterRun(ctx: RunContext, result: RunResult): Promise<void> {
    this.pairs.ended(ctx.runId);
    return this.each("afterRun", ctx, [Object.freeze({ ...result })]);
  }
  /**
   * Each hook gets its own copy of the error: they shared one, so what one extension changed
   * (a "redacted" message, a reporter's mark) the next one saw. Not frozen: error reporters mark
   * what they have reported.
   */
  onError(ctx: RunContext, error: RunError): Promise<void> {
    return this.each("onError", ctx, () => [ownCopy(error)]);
  }
  /** Each hook gets a frozen copy: the message itself is in the history the model is sent. */
  onCommitted(ctx: RunContext, committed: CommittedMessage): Promise<void> {
    // No extension listens: no copy (one of every message the run commits, walked whole).
    if (!this.list.some((extension) => extension.onCommitted)) return Promise.resolve();
    return this.each("onCommitted", ctx, [frozenCopy(committed)], "leave");
  }

  /** Whether any extension has an `onSessionDeleted` hook. */
  get handlesDeletes(): boolean {
    return this.list.some((extension) => extension.onSessionDeleted);
  }

  /**
   * Every `onSessionDeleted` hook for one deleted session, in load order, each within
   * `timeoutMs`; a failure is logged and counted, and the next hook still runs. Once `stop`
   * is aborted (the worker stopping) a pending hook is no longer waited for and no more are
   * called: the stop waited out the hook's whole time, holding every close after it.
   */
  async sessionDeleted(sessionId: string, ctx: Omit<DeletedContext, "signal">, stop?: AbortSignal) {
    for (const extension of this.list) {
      if (!extension.onSessionDeleted) continue;
      if (stop?.aborted) return;
      // A controller of the hook's own, not AbortSignal.any([AbortSignal.timeout(…), stop]):
      // on Node 20 each such call left a WeakRef on `stop`, which lives as long as the worker
      // (one per deleted session), and the timeout's signal, held only weakly, could be
      // collected before its time, so the hook's signal was never aborted at its limit.
      // Set before `call`'s own limit, so the hook's signal is aborted first.
      const controller = new AbortController();
      const timer = setTimeout(
        () => controller.abort(new DOMException("The operation was aborted due to timeout", "TimeoutError")),
        this.timeoutMs,
      );
      const onStop = () => controller.abort(stop?.reason);
      stop?.addEventListener("abort", onStop, { once: true });
      const signal = this.hookSignal(controller.signal, { sessionId });
      callingWith<Calling>(signal, { hook: "onSessionDeleted", extension });
      try {
        await this.call(
          "onSessionDeleted",
          extension,
          () =>
            // Its own Date: a Date is mutable, and one hook's change reached the next.
            extension.onSessionDeleted!(sessionId, {
              ...ctx,
              deletedAt: new Date(ctx.deletedAt),
              signal,
            }),
          stop,
        );
      } catch (error) {
        if (stop?.aborted) return;
        this.failed("onSessionDeleted", extension, { sessionId }, error);
      } finally {
        clearTimeout(timer);
        stop?.removeEventListener("abort", onStop);
      }
    }
  }
}
