/**
 * Extensions (contracts §8): modules a worker loads (`fleet worker --extensions FILE`) whose
 * hooks run around every run. The rules, enforced here and in session-job.ts:
 * - `beforeRun`: every run and every resume a worker starts, before the first model call; a
 *   throw ends the run `failed` with the hook's message, and nothing is sent to the model.
 * - `onMessage`: only for a run that carries new user input (never on a resume).
 * - `afterRun`: every run a worker ends (`result.outcome` is the run's `endedReason`).
 * - `onError`: a run that ends `failed`, `provider_error`, or finds nothing to resume (the
 *   error's `reason` is then the resume point's reason).
 * - `onCommitted` (additive): each message the run committed, after its commit.
 * - `onSessionDeleted` (additive): each deleted session, by one worker, at least once
 *   (worker/deletion-hooks.ts).
 * Errors in hooks other than `beforeRun` are logged and counted
 * (`fleet_hook_failures_total{hook}`); they never lose a message or stop a run. Neither does
 * the built-in transcript's `beforeRun` (a resume's turn recorded again): a transcript is a
 * record, not a gate, so a line it cannot write is lost, logged and counted.
 */
import { appendFile as writeMore } from "node:fs/promises";
import { join } from "node:path";
import type { Logger } from "pino";
import type { AgentConfig } from "../shared/agent-config.js";
import { makeDirectory, PRIVATE_DIRECTORY_MODE } from "../shared/make-directory.js";
import type { StoredMessage } from "../shared/messages.js";
import type { FleetMetrics } from "../shared/metrics.js";
import { thrownText } from "../shared/thrown-text.js";
import { frozenCopy } from "./hook-views.js";
import { MAX_TIMER_MS } from "./tools/time-limit.js";

export type RunContext = {
  sessionId: string;
  runId: string;
  kind: "run" | "resume";
  resumeKind: string | null;
  trigger: string;
  agent: AgentConfig | unknown;
  metadata: Record<string, unknown>;
  signal: AbortSignal;
  /** The new user text; null on a resume. */
  inputMessage: string | null;
  /** The stored history before this run appended anything (additive). */
  history: readonly StoredMessage[];
};

export type RunResult = { outcome: string; error?: string };

/** The error `onError` gets: `reason` for a resume that found nothing to resume. */
export class RunError extends Error {
  override name = "RunError";
  constructor(
    message: string,
    readonly outcome: string,
    readonly reason?: string,
  ) {
    super(message);
  }
}

export type CommittedMessage = { runId: string; seq: number; message: StoredMessage };

export type Extension = {
  name: string;
  beforeRun?(ctx: RunContext): unknown;
  onMessage?(ctx: RunContext, input: string): unknown;
  afterRun?(ctx: RunContext, result: RunResult): unknown;
  onError?(ctx: RunContext, error: RunError): unknown;
  onCommitted?(ctx: RunContext, committed: CommittedMessage): unknown;
  /**
   * (Additive) a session was deleted (API or retention): remove what the extension keeps
   * about it. Called by one worker per deleted session, at least once (again if that worker
   * died before it was done).
   */
  onSessionDeleted?(sessionId: string, ctx: DeletedContext): unknown;
};

/** What `onSessionDeleted` is told besides the session's id. */
export type DeletedContext = {
  tenant: string;
  deletedAt: Date;
  /** 1 the first time; more when a worker that was calling the hooks died first. */
  attempt: number;
  /** Aborted when the hook's time (FLEET_HOOK_TIMEOUT_MS) is up or the worker stops. */
  signal: AbortSignal;
};

/** Declares an extension (typed; returns it unchanged). */
export function defineExtension<E extends Extension>(extension: E): E {
  return extension;
}

export type HookName = "beforeRun" | "onMessage" | "afterRun" | "onError";

/**
 * Extensions whose `beforeRun` failure is logged and counted like any other hook's instead of
 * ending the run: the built-in transcript (transcriptExtension). Its resume record failed on a
 * file it could not write (a full disk, a lost mount), and every resume of the session then
 * ended `failed` until the session was parked, though its lines are documented as lost then.
 */
const RECORD_ONLY = new WeakSet<Extension>();

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

  /**
   * Calls one hook and waits for it at most `timeoutMs`: a hook that never settles would
   * hold its run (and its worker slot) forever, and a cancel could not end it. Past the
   * limit the hook has failed, and whatever it still does, it does on its own.
   */
  private async call(hook: string, extension: Extension, run: () => unknown): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_resolve, reject) => {
      timer = setTimeout(
        () =>
          reject(
            new Error(
              `the ${hook} hook of extension "${extension.name}" did not finish within ${this.timeoutMs} ms`,
            ),
          ),
        this.timeoutMs,
      );
    });
    try {
      await Promise.race([Promise.resolve().then(run), late]);
    } finally {
      clearTimeout(timer);
    }
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
    this.log.warn(
      { err: error, extension: extension.name, hook, sessionId: ctx.sessionId, runId: ctx.runId },
      "extension hook failed",
    );
  }

  /** The message of the first `beforeRun` that threw (the run then ends `failed`), or null. */
  async beforeRun(ctx: RunContext): Promise<string | null> {
    for (const extension of this.list) {
      if (!extension.beforeRun) continue;
      try {
        await this.call("beforeRun", extension, () => extension.beforeRun!(ctx));
      } catch (error) {
        this.failed("beforeRun", extension, ctx, error);
        if (RECORD_ONLY.has(extension)) continue;
        return `beforeRun hook of extension "${extension.name}" failed: ${thrownText(error)}`;
      }
    }
    return null;
  }

  private async each(hook: Exclude<keyof Extension, "name">, ctx: RunContext, ...args: unknown[]) {
    for (const extension of this.list) {
      const fn = extension[hook] as ((...a: unknown[]) => unknown) | undefined;
      if (!fn) continue;
      try {
        await this.call(hook, extension, () => fn.call(extension, ctx, ...args));
      } catch (error) {
        this.failed(hook, extension, ctx, error);
      }
    }
  }

  onMessage(ctx: RunContext, input: string): Promise<void> {
    return this.each("onMessage", ctx, input);
  }
  afterRun(ctx: RunContext, result: RunResult): Promise<void> {
    return this.each("afterRun", ctx, Object.freeze({ ...result }));
  }
  onError(ctx: RunContext, error: RunError): Promise<void> {
    return this.each("onError", ctx, error);
  }
  /** Each hook gets a frozen copy: the message itself is in the history the model is sent. */
  onCommitted(ctx: RunContext, committed: CommittedMessage): Promise<void> {
    return this.each("onCommitted", ctx, frozenCopy(committed));
  }

  /** Whether any extension has an `onSessionDeleted` hook. */
  get handlesDeletes(): boolean {
    return this.list.some((extension) => extension.onSessionDeleted);
  }

  /**
   * Every `onSessionDeleted` hook for one deleted session, in load order, each within
   * `timeoutMs`; a failure is logged and counted, and the next hook still runs.
   */
  async sessionDeleted(sessionId: string, ctx: Omit<DeletedContext, "signal">, stop?: AbortSignal) {
    for (const extension of this.list) {
      if (!extension.onSessionDeleted) continue;
      const timeout = AbortSignal.timeout(this.timeoutMs);
      const signal = stop ? AbortSignal.any([timeout, stop]) : timeout;
      try {
        await this.call("onSessionDeleted", extension, () =>
          extension.onSessionDeleted!(sessionId, { ...ctx, signal }),
        );
      } catch (error) {
        this.failed("onSessionDeleted", extension, { sessionId }, error);
      }
    }
  }
}

/** The mode a transcript file is created with (its directory: PRIVATE_DIRECTORY_MODE). */
export const TRANSCRIPT_FILE_MODE = 0o600;

/** Outcomes after which `onError` runs. */
export const ERROR_OUTCOMES: ReadonlySet<string> = new Set(["failed", "provider_error", "nothing_to_resume"]);

/**
 * The built-in `transcript` extension (FLEET_TRANSCRIPT_DIR): `DIR/<sessionId>.jsonl`, one
 * line `{"runId","seq","message"}` per message a run committed. A resume first records its
 * turn again from the last user message, so the file's last record of each turn is whole.
 * Transcripts hold whole conversations: a file is created 0600 and a directory this makes
 * 0700 (a directory that exists is left as it is); `fleet worker` checks DIR at start
 * (preflight.ts `checkTranscriptDir`).
 */
export function transcriptExtension(
  dir: string,
  /** Sessions deleted while this worker runs: nothing more is written for them (transcript-cleanup.ts). */
  deleted: { has(sessionId: string): boolean } = { has: () => false },
): Extension {
  let made: Promise<unknown> | null = null;
  const write = async (sessionId: string, lines: CommittedMessage[]) => {
    if (lines.length === 0) return;
    const text = lines
      .map((line) => `${JSON.stringify({ runId: line.runId, seq: line.seq, message: line.message })}\n`)
      .join("");
    const append = async () => {
      // A failed mkdir is tried again at the next write: kept, its rejection failed every
      // later write of this worker, also once the directory could be made.
      made ??= makeDirectory(dir, PRIVATE_DIRECTORY_MODE).catch((error: unknown) => {
        made = null;
        throw error;
      });
      await made;
      if (deleted.has(sessionId)) return;
      await writeMore(join(dir, `${sessionId}.jsonl`), text, { mode: TRANSCRIPT_FILE_MODE });
    };
    try {
      await append();
    } catch (error) {
      // The directory went after it was made (removed, a mount gone): made again, once.
      if ((error as NodeJS.ErrnoException).code !== "ENOENT" || made === null) throw error;
      made = null;
      await append();
    }
  };
  const transcript: Extension = {
    name: "transcript",
    async beforeRun(ctx) {
      if (ctx.kind !== "resume") return;
      let start = -1;
      for (let i = ctx.history.length - 1; i >= 0; i--)
        if (ctx.history[i]!.role === "user") {
          start = i;
          break;
        }
      if (start < 0) return;
      await write(
        ctx.sessionId,
        ctx.history.slice(start).map((message) => ({ runId: ctx.runId, seq: message.seq, message })),
      );
    },
    async onCommitted(ctx, committed) {
      await write(ctx.sessionId, [committed]);
    },
  };
  RECORD_ONLY.add(transcript);
  return transcript;
}
