/**
 * What the agent loop (agent-loop.ts) is given and what it returns: its dependencies, one
 * run's input, the observer told of each commit and tool start, and the loop's result.
 */
import type { AgentConfig } from "../shared/agent-config.js";
import type { Message, RunUsage, StoredMessage, ToolCall } from "../shared/messages.js";
import type { FleetMetrics } from "../shared/metrics.js";
import type { ModelPrice } from "../shared/prices.js";
import type { Fence, FencedWrites } from "../shared/store/fenced-writes.js";
import type { TailState } from "../shared/tail-state.js";
import type { RetryPolicy } from "./call-model.js";
import type { LeaseCheck } from "./lease-guard.js";
import type { ModelProvider } from "./models/provider.js";
import type { Sleep } from "./models/scripted.js";
import type { RunOutcome } from "./run-outcome.js";
import type { ToolCallDeps } from "./tool-call.js";
import type { ToolRegistry } from "./tools/registry.js";

export type AgentLoopDeps = {
  /** `appendStep` (when present) also answers the cancel check, saving the read before a tool. */
  writes: Pick<FencedWrites, "append" | "reserveModelCall" | "countBilledTokens"> &
    Partial<Pick<FencedWrites, "appendStep">>;
  tools: Pick<ToolRegistry, "get" | "specs">;
  metrics: Pick<FleetMetrics, "modelStops" | "toolCalls"> &
    Partial<Pick<FleetMetrics, "modelTokens" | "toolTimeouts" | "toolsAbandoned">>;
  sleep: Sleep;
  retryPolicy?: RetryPolicy;
  /**
   * The job's lease guard (lease-guard.ts): asked, from memory, before every append and
   * every tool start. Absent only where no lease exists (unit tests of the loop).
   */
  leaseGuard?: LeaseCheck;
  /**
   * Whether the session was cancelled (contracts §9), read from Postgres right before each
   * tool starts: the cancel commits before its request returns, so no tool starts after it.
   * Also true when the session's last cancel found `runId` running, though a new message
   * re-opened the session since. Throws FencedError when the epoch moved. Absent in unit
   * tests of the loop.
   */
  cancelled?: (fence: Fence, runId: string) => Promise<boolean>;
  /**
   * FLEET_RUN_MAX_MS: how long the loop may go on before it ends `max_turns`, checked before each
   * model step; absent or 0: no bound. A tenant's run cannot hold a worker slot for days.
   */
  runMaxMs?: number;
} & Pick<ToolCallDeps, "toolTimeoutMs" | "log">;

export type LoopInput = {
  fence: Fence;
  runId: string;
  agent: AgentConfig;
  model: ModelProvider;
  /** The history as stored, including what the run appended when it started. */
  history: StoredMessage[];
  signal: AbortSignal;
  /**
   * The session's use of `agent.budget` before this call; kept current as steps are stored.
   * `costUsd`: USD its steps cost so far; when absent it is summed from the history's stored
   * `usage.costUsd` (steps with unknown usage of earlier runs are not counted there).
   */
  budget?: { tokensUsed: number; costUsd?: number };
  /** The price the session's unreported tokens count at (loop-budget.ts `unreportedPrice`). */
  unreportedPrice?: ModelPrice | undefined;
  /** Told of each commit and each tool start (events and extensions: session-job.ts). */
  observer?: LoopObserver;
  /**
   * Goal mode (contracts §8): when the model ends its turn, an internal message restates the
   * goal and asks it to keep working or answer GOAL_MET, at most `maxRounds` times per run.
   */
  goal?: { text: string; maxRounds: number } | null;
  /**
   * Consecutive pauses the run took before it was handed back to wait for capacity
   * (`pausesTaken`): the same request goes on, so the cap on consecutive pauses goes on too.
   */
  pausesTaken?: number;
  /**
   * Leave the run's last message unappended and return it as `last` (session-job.ts appends
   * it in the statement that ends the run). Only where nothing must see it before the run's
   * end is decided: no extension hooks.
   */
  deferLast?: boolean;
};

export type LoopObserver = {
  /** After the message is committed (and in the in-memory history). */
  committed(message: StoredMessage): Promise<void>;
  /**
   * Right before a call's tool starts running, once its arguments passed their check; never
   * for a call whose tool does not run. Must not throw.
   */
  toolStarted(call: ToolCall): void;
  /**
   * Whether `committed` may wait on something slow (extension hooks): the cancel status read
   * with an append then no longer counts as read right before the next tool starts.
   */
  awaitsHooks?: boolean;
};

export type LoopResult = {
  outcome: RunOutcome;
  error?: string;
  usage: RunUsage;
  /** `provider_error` only: the provider refused the request and would refuse it again (call-model.ts). */
  rejected?: true;
  /** With `deferLast`: the run's last step, not yet stored (the caller stores it with the run's end). */
  last?: { message: Message; tail: TailState; estimatedTokens: number };
};
