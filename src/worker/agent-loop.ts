/**
 * The agent loop of one run: call the model, append its step, run the tools it asked for
 * and append each result as it finishes, until a normal answer, an abnormal stop, the
 * turn limit or an abort. Every append is fenced; a FencedError ends the loop at once.
 */
import type { AgentConfig } from "../shared/agent-config.js";
import { tailStateAfter } from "../shared/history-tail.js";
import type { Message, RunUsage, StoredMessage, ToolCall, ToolMessage, Usage } from "../shared/messages.js";
import type { FleetMetrics } from "../shared/metrics.js";
import { roundUsd } from "../shared/prices.js";
import { CANCELLED_BEFORE_START_TEXT, CANCELLED_WHILE_RUNNING_PREFIX } from "../shared/resume-plan.js";
import { requestsTools } from "../shared/resume-point.js";
import { stopReasonLabel } from "../shared/stop-reasons.js";
import type { Fence, FencedWrites, HistoryCursor } from "../shared/store/fenced-writes.js";
import { lastStepSeq } from "../shared/store/rows.js";
import type { TailState } from "../shared/tail-state.js";
import { callModel, type RetryPolicy } from "./call-model.js";
import { CapacityWait } from "./endpoint-gate.js";
import type { LeaseCheck } from "./lease-guard.js";
import { addUsage, budgetSpent, countBilled, countTokens } from "./loop-budget.js";
import type { ModelProvider } from "./models/provider.js";
import { sanitizeText } from "./models/sanitize-text.js";
import type { Sleep } from "./models/scripted.js";
import { outcomeOfStop, type RunOutcome } from "./run-outcome.js";
import { runToolCall, type ToolCallDeps } from "./tool-call.js";
import { type ToolRegistry, toolLabel } from "./tools/registry.js";

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
  /** Right before a tool call starts. */
  toolStarted(call: ToolCall): Promise<void>;
  /**
   * Whether `committed` may wait on something slow (extension hooks): the cancel status read
   * with an append then no longer counts as read right before the next tool starts.
   */
  awaitsHooks?: boolean;
};

/** How a goal round's internal message starts (goalRoundText). */
const GOAL_ROUND = "Goal (round ";

/**
 * The goal rounds the run has had already (pure): the goal-round messages after its input,
 * the history's last user message. Not 0 for a run handed back to wait for capacity and
 * taken up again (contracts §15): `maxRounds` is per run, like `maxTurns`, and counting
 * from 0 again gave each hand-back `maxRounds` more rounds.
 */
export function goalRoundsTaken(history: readonly Message[]): number {
  let rounds = 0;
  for (let i = history.length - 1; i >= 0; i--) {
    const message = history[i]!;
    if (message.role === "user") break;
    if (message.role === "internal" && message.content.startsWith(GOAL_ROUND)) rounds++;
  }
  return rounds;
}

/**
 * The consecutive pauses a handed-back run took before its hand-back (pure): the paused steps
 * the history ends with, at most `steps`, the model steps the run committed (an earlier run's
 * pauses are not this run's: a resume starts its count at 0, as any request does).
 */
export function pausesTaken(history: readonly Message[], steps: number): number {
  let pauses = 0;
  for (let i = history.length - 1; i >= 0 && pauses < steps; i--) {
    const message = history[i]!;
    if (message.role !== "assistant" || message.stopReason !== "paused") break;
    pauses++;
  }
  return pauses;
}

/** What the model answers when the goal of goal mode is met. */
export const GOAL_MET = "GOAL_MET";

/** The internal message of a goal round. */
export function goalRoundText(goal: { text: string }, round: number, maxRounds: number): string {
  return (
    `${GOAL_ROUND}${round} of ${maxRounds}): ${goal.text}\n` +
    `If the goal is met, answer ${GOAL_MET}. Otherwise keep working toward it.`
  );
}

export type LoopResult = {
  outcome: RunOutcome;
  error?: string;
  usage: RunUsage;
  /** `provider_error` only: the provider refused the request and would refuse it again (call-model.ts). */
  rejected?: true;
  /** With `deferLast`: the run's last step, not yet stored (the caller stores it with the run's end). */
  last?: { message: Message; tail: TailState; estimatedTokens: number };
};

/** An in-memory history that appends through the fence and keeps its cursor. */
class FencedHistory {
  /**
   * Whether the last append found the session cancelled (null: unknown, e.g. the writes
   * cannot say, or something slow ran since).
   */
  cancelledAtLastAppend: boolean | null = null;

  constructor(
    private readonly deps: AgentLoopDeps,
    private readonly input: LoopInput,
  ) {}

  get messages(): readonly Message[] {
    return this.input.history;
  }

  private cursor(): HistoryCursor {
    const history = this.input.history;
    return { lastSeq: history.at(-1)?.seq ?? 0, lastStepSeq: lastStepSeq(history) };
  }

  /**
   * `estimatedTokens`: counted against the token budget for a step with unknown usage; less,
   * what its usage holds that was counted already (fenced-writes.ts `append`).
   */
  async append(message: Message, estimatedTokens = 0): Promise<void> {
    await this.deps.leaseGuard?.whenValid(this.input.fence.epoch);
    this.cancelledAtLastAppend = null;
    const args = [
      this.input.fence,
      this.cursor(),
      this.input.runId,
      [message],
      tailStateAfter(this.input.history, [message]),
      estimatedTokens,
    ] as const;
    let stored: StoredMessage | undefined;
    let cancelled: boolean | null = null;
    if (this.deps.writes.appendStep) {
      const step = await this.deps.writes.appendStep(...args);
      [stored] = step.stored;
      cancelled = step.cancelled;
    } else {
      [stored] = await this.deps.writes.append(...args);
    }
    this.input.history.push(stored!);
    await this.input.observer?.committed(stored!);
    if (!this.input.observer?.awaitsHooks) this.cancelledAtLastAppend = cancelled;
  }

  /** What the last message would be appended with (for a caller that stores it itself). */
  lastOf(message: Message, estimatedTokens: number): NonNullable<LoopResult["last"]> {
    return { message, tail: tailStateAfter(this.input.history, [message]), estimatedTokens };
  }

  /**
   * Whether the session was cancelled, right before a tool starts: the answer of the append
   * that just proved the lease when it gave one (and nothing slow ran since), else a read.
   */
  async cancelled(): Promise<boolean> {
    const known = this.cancelledAtLastAppend;
    this.cancelledAtLastAppend = null;
    if (known !== null) return known;
    return (await this.deps.cancelled?.(this.input.fence, this.input.runId)) ?? false;
  }
}

/** The result of a call that was never started because its run was cancelled (resume-plan.ts). */
export { CANCELLED_BEFORE_START_TEXT };

function cancelledResult(call: ToolCall): ToolMessage {
  return {
    role: "tool",
    toolCallId: call.id,
    name: call.name,
    content: CANCELLED_BEFORE_START_TEXT,
    success: false,
  };
}

export async function runAgentLoop(input: LoopInput, deps: AgentLoopDeps): Promise<LoopResult> {
  const { agent, signal } = input;
  const history = new FencedHistory(deps, input);
  // A listed tool this worker lacks is a configuration error no retry can fix (contracts.md
  // §12): the run ends `invalid_agent` before any model call, and the session is parked.
  const missing = agent.tools.findIndex((name) => !deps.tools.get(name));
  if (missing >= 0) {
    const error = `agent.tools[${missing}]: no tool named "${agent.tools[missing]}" is registered in this worker`;
    return { outcome: "invalid_agent", error, usage: { inputTokens: 0, outputTokens: 0 } };
  }
  const toolSpecs = deps.tools.specs(agent.tools);
  const listed = new Set(agent.tools);
  const usage: RunUsage = { inputTokens: 0, outputTokens: 0, unknownSteps: 0 };
  let pauses = input.pausesTaken ?? 0;
  let goalRounds = input.goal ? goalRoundsTaken(input.history) : 0;
  for (let turn = 0; ; turn++) {
    if (signal.aborted) return { outcome: "cancelled", usage };
    if (turn >= agent.maxTurns) return { outcome: "max_turns", usage };
    const spent = await budgetSpent(input, deps);
    if (spent) return { outcome: "budget_exhausted", error: spent, usage };
    /** Tokens of this call's failed attempts stored in the session's count as they failed. */
    let counted = 0;
    const step = await callModel(
      input.model,
      {
        sessionId: input.fence.sessionId,
        system: agent.system,
        history: history.messages,
        tools: toolSpecs,
        signal,
      },
      {
        sleep: deps.sleep,
        policy: deps.retryPolicy,
        // Billed: stored at once, so that a crash before the run's end loses none of it.
        billedAttempt: async (reported: Usage) => {
          const tokens = Math.max(0, Math.ceil(reported.inputTokens + reported.outputTokens));
          await deps.writes.countBilledTokens(input.fence, tokens);
          counted += tokens;
        },
        ...(agent.budget === undefined
          ? {}
          : { reserveRetry: (billed: Usage | undefined) => budgetSpent(input, deps, billed) }),
      },
    ).catch((error: unknown) => {
      // Handed back to wait for capacity after billed attempts: the token metric and the budget
      // in memory count them now (the hand-back adds them to the run's usage: hand-back.ts).
      if (error instanceof CapacityWait && error.billed) countBilled(input, deps, usage, error.billed);
      throw error;
    });
    if (!step.ok) {
      // Billed, though no step came of it: the run's usage and the budget count it (the
      // session's count has held its tokens since each attempt failed).
      if (step.billed) countBilled(input, deps, usage, step.billed);
      if (step.aborted) return { outcome: "cancelled", error: step.error, usage };
      if (step.budgetSpent)
        return {
          outcome: "budget_exhausted",
          error: `${step.budgetSpent} (the last failed: ${step.error})`,
          usage,
        };
      return {
        outcome: "provider_error",
        error: step.error,
        usage,
        ...(step.rejected ? { rejected: true } : {}),
      };
    }
    const message = step.message;
    // The pause limit caps *consecutive* pauses (resume-semantics §2): any other step (a tool
    // step, an answer a goal round follows) ends the run of pauses.
    if (outcomeOfStop(message.stopReason) !== "paused") pauses = 0;
    if (message.usage) {
      addUsage(usage, message.usage);
      countTokens(deps, input.model.identity, message.usage);
      if (input.budget) input.budget.tokensUsed += message.usage.inputTokens + message.usage.outputTokens;
    } else {
      // The sums cannot count it: the run's usage says how many steps they miss.
      usage.unknownSteps = (usage.unknownSteps ?? 0) + 1;
    }
    // Cost: reported, else the estimate's (unknown usage never costs 0 against the budget).
    const stepCost = message.usage?.costUsd ?? step.estimatedCostUsd ?? 0;
    if (input.budget?.costUsd !== undefined) input.budget.costUsd = roundUsd(input.budget.costUsd + stepCost);
    // Unknown usage never counts as 0 against the budget: a high-side estimate counts instead.
    const estimated = message.usage
      ? 0
      : (step.estimatedUsage?.inputTokens ?? 0) + (step.estimatedUsage?.outputTokens ?? 0);
    if (input.budget) input.budget.tokensUsed += estimated;
    // The step's usage (or estimate) holds its call's failed attempts, counted as they failed.
    const uncounted = estimated - counted;
    if (input.deferLast && !requestsTools(message)) {
      const outcome = outcomeOfStop(message.stopReason);
      const goal = input.goal;
      const goalGoesOn =
        goal &&
        outcome === "completed" &&
        goalRounds < goal.maxRounds &&
        !message.content.includes(GOAL_MET) &&
        !signal.aborted;
      const pauseGoesOn = outcome === "paused" && pauses < agent.pauseLimit;
      if (!goalGoesOn && !pauseGoesOn) {
        deps.metrics.modelStops.inc({ stop_reason: stopReasonLabel(message.stopReason) });
        return { outcome, usage, last: history.lastOf(message, uncounted) };
      }
    }
    await history.append(message, uncounted);
    deps.metrics.modelStops.inc({ stop_reason: stopReasonLabel(message.stopReason) });
    if (requestsTools(message)) {
      const calls = message.toolCalls ?? [];
      for (const [index, call] of calls.entries()) {
        if (signal.aborted || (await history.cancelled())) {
          // Answer the calls that never started, so the history says exactly what happened.
          for (const skipped of calls.slice(index)) await history.append(cancelledResult(skipped));
          for (const skipped of calls.slice(index))
            deps.metrics.toolCalls.inc({ tool: toolLabel(deps.tools, skipped.name), outcome: "failed" });
          return { outcome: "cancelled", usage };
        }
        // Ownership was proven right before this side effect: the assistant step (or the
        // previous call's result) was just appended through the fence, so a fenced-out
        // worker has already stopped with a FencedError and runs nothing. Only the tools the
        // agent lists may run: any other name (even one registered here) gets a failed result.
        const tool = listed.has(call.name) ? deps.tools.get(call.name) : undefined;
        // A freeze can fall between that append and this line, and no epoch fences a tool:
        // the lease must still be provably ours, now, on the monotonic clock.
        await deps.leaseGuard?.whenValid(input.fence.epoch);
        await input.observer?.toolStarted(call);
        const result = await runToolCall(tool, call, input, deps);
        const toolMessage: ToolMessage = {
          role: "tool",
          toolCallId: call.id,
          name: call.name,
          content: sanitizeText(
            !result.success && signal.aborted && !result.timedOut
              ? `${CANCELLED_WHILE_RUNNING_PREFIX}${result.content}`
              : result.content,
          ),
          success: result.success,
        };
        await history.append(toolMessage);
        deps.metrics.toolCalls.inc({
          tool: toolLabel(deps.tools, call.name),
          outcome: result.success ? "ok" : "failed",
        });
      }
      continue;
    }
    const outcome = outcomeOfStop(message.stopReason);
    const goal = input.goal;
    if (
      goal &&
      outcome === "completed" &&
      goalRounds < goal.maxRounds &&
      !message.content.includes(GOAL_MET) &&
      !signal.aborted
    ) {
      goalRounds++;
      await history.append({ role: "internal", content: goalRoundText(goal, goalRounds, goal.maxRounds) });
      continue;
    }
    if (outcome === "paused" && pauses < agent.pauseLimit) {
      pauses++;
      continue;
    }
    return { outcome, usage };
  }
}
