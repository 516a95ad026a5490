/**
 * What one run carries from its start (process-run.ts) through its agent loop (run-loop.ts)
 * to its end (end-run.ts), and what the job keeps of its session between runs.
 */
import type { Logger } from "pino";
import type { parseAgentConfig } from "../shared/agent-config.js";
import type { RunRow } from "../shared/db/schema.js";
import type { StoredMessage } from "../shared/messages.js";
import type { SessionEventLog } from "../shared/session-event-log.js";
import type { Fence, HistoryCursor } from "../shared/store/fenced-writes.js";
import { lastStepSeq } from "../shared/store/rows.js";
import type { RunContext } from "./extensions.js";
import type { ledgerOf, previousPart } from "./hand-back.js";
import type { Extensions } from "./hook-runner.js";
import type { SessionJobDeps } from "./job-deps.js";
import type { LoopObserver } from "./loop-types.js";

export type SessionState = {
  fence: Fence;
  history: StoredMessage[];
  agent: unknown;
  /** The stored agent, validated once per job (null until the first run needs it). */
  parsedAgent: ReturnType<typeof parseAgentConfig> | null;
  /** What the session has used of its budget so far (kept current by the agent loop). */
  budget: { tokensUsed: number };
  /** The session's events (null when events are off). */
  events: SessionEventLog | null;
  /** Which run of this job committed each message (for MESSAGE events). */
  runBySeq: Map<number, string>;
};

/** A run past its start: what its loop and its end need. */
export type StartedRun = {
  run: RunRow;
  state: SessionState;
  signal: AbortSignal;
  deps: SessionJobDeps;
  kind: "run" | "resume";
  logFields: ReturnType<typeof runLogFields>;
  startedAt: number;
  /** The part of the run before it was handed back to wait for capacity (contracts §15), or null. */
  previous: ReturnType<typeof previousPart>;
  ledger: ReturnType<typeof ledgerOf>;
  /** The history before the run appended anything. */
  before: StoredMessage[];
  /** The extensions' context, when any extension is loaded. */
  ctx: RunContext | null;
  extensions: Extensions | null;
  /** A beforeRun hook's failure: the run ends `failed` without calling the model. */
  hookFailure: string | null;
  observer: LoopObserver;
};

/**
 * The `workerId` each logger binds (undefined: none), read once per logger: pino's `bindings()`
 * parses the logger's bound JSON again on every call, and this was once per run. (The worker
 * never changes a logger's bindings once it is made.)
 */
const boundWorkerIds = new WeakMap<object, { workerId: unknown }>();

function boundWorkerId(log: SessionJobDeps["log"]): unknown {
  let bound = boundWorkerIds.get(log);
  if (!bound) {
    const bindings = (log as Partial<Pick<Logger, "bindings">>).bindings?.() as
      | { workerId?: unknown }
      | undefined;
    bound = { workerId: bindings?.workerId };
    boundWorkerIds.set(log, bound);
  }
  return bound.workerId;
}

/**
 * The fields of a run's "run started" / "run ended" info lines: `sessionId`, `runId`,
 * `workerId`, `kind` (`run`, `resume`). `workerId` is left out when the logger already binds
 * it (the worker's does), so that no line carries the key twice.
 */
export function runLogFields(run: RunRow, kind: "run" | "resume", deps: SessionJobDeps) {
  return {
    sessionId: run.sessionId,
    runId: run.id,
    ...(boundWorkerId(deps.log) === deps.workerId ? {} : { workerId: deps.workerId }),
    kind,
  };
}

export function cursorOf(history: readonly StoredMessage[]): HistoryCursor {
  return { lastSeq: history.at(-1)?.seq ?? 0, lastStepSeq: lastStepSeq(history) };
}
