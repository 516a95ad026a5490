/**
 * The agent loop of one run: call the model, append its step, run the tools it asked for
 * and append each result as it finishes, until a normal answer, an abnormal stop, the
 * turn limit or an abort. Every append is fenced; a FencedError ends the loop at once.
 * What it is given and returns: loop-types.ts; its history: fenced-history.ts; goal rounds
 * and pauses: goal-rounds.ts.
 */
import type { RunUsage, ToolCall, ToolMessage, Usage } from "../shared/messages.js";
import { roundUsd } from "../shared/prices.js";
import { CANCELLED_BEFORE_START_TEXT, CANCELLED_WHILE_RUNNING_PREFIX } from "../shared/resume-plan.js";
import { requestsTools } from "../shared/resume-point.js";
import { stopReasonLabel } from "../shared/stop-reasons.js";
import { callModel } from "./call-model.js";
import { CapacityWait } from "./endpoint-gate.js";
import { FencedHistory } from "./fenced-history.js";
import { GOAL_MET, goalRoundsTaken, goalRoundText } from "./goal-rounds.js";
import {
  fitResult,
  historyFull,
  NOT_RUN_TEXT,
  RUN_ROOM,
  resultRoom,
  stepResultsFull,
} from "./history-bound.js";
import { addUsage, budgetSpent, countBilled, countTokens } from "./loop-budget.js";
import type { AgentLoopDeps, LoopInput, LoopResult } from "./loop-types.js";
import { sanitizeText } from "./models/sanitize-text.js";
import { outcomeOfStop } from "./run-outcome.js";
import { runToolCall } from "./tool-call.js";
import { toolLabel } from "./tools/registry.js";

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

/** Answers `calls` as not run for want of room in the history (history-bound.ts), in their order. */
async function answerNotRun(history: FencedHistory, deps: AgentLoopDeps, calls: readonly ToolCall[]) {
  for (const call of calls) {
    await history.append({
      role: "tool",
      toolCallId: call.id,
      name: call.name,
      content: NOT_RUN_TEXT,
      success: false,
    });
    deps.metrics.toolCalls.inc({ tool: toolLabel(deps.tools, call.name), outcome: "failed" });
  }
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
  const began = performance.now();
  for (let turn = 0; ; turn++) {
    if (signal.aborted) return { outcome: "cancelled", usage };
    if (turn >= agent.maxTurns) return { outcome: "max_turns", usage };
    const overtime = runOvertime(began, performance.now(), deps.runMaxMs, turn);
    if (overtime) return { outcome: "max_turns", error: overtime, usage };
    const full = historyFull(history.messages);
    if (full) return { outcome: "budget_exhausted", error: full, usage };
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
    // The seq the step was stored at: with each call's id, its key (ToolContext `callKey`).
    const stepSeq = input.history.at(-1)?.seq ?? 0;
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
        // The history bound holds within the step (history-bound.ts): the room left, less a
        // short answer for each call after this one. Too little to say more than that: this
        // call and those after it are answered as not run, and the run ends.
        const room = resultRoom(history.messages, calls.length - index - 1);
        if (room < RUN_ROOM) {
          await answerNotRun(history, deps, calls.slice(index));
          const error = stepResultsFull(history.messages, { cut: false, notRun: calls.length - index });
          return { outcome: "budget_exhausted", error, usage };
        }
        // A freeze can fall between that append and this line, and no epoch fences a tool:
        // the lease must still be provably ours, now, on the monotonic clock.
        await deps.leaseGuard?.whenValid(input.fence.epoch);
        // TOOL_STARTED when the tool starts, after its arguments passed their check: a call
        // whose tool never ran (unlisted, arguments refused, stopped during the check) has its
        // TOOL_FINISHED only, as a call answered as cancelled before it (contracts §7).
        const observer = input.observer;
        const result = await runToolCall(tool, call, { ...input, stepSeq }, deps, () =>
          observer?.toolStarted(call),
        );
        const fitted = fitResult(
          sanitizeText(
            !result.success && signal.aborted && !result.timedOut && !result.notStarted
              ? `${CANCELLED_WHILE_RUNNING_PREFIX}${result.content}`
              : result.content,
          ),
          room,
        );
        const toolMessage: ToolMessage = {
          role: "tool",
          toolCallId: call.id,
          name: call.name,
          content: fitted.content,
          success: result.success,
        };
        await history.append(toolMessage);
        deps.metrics.toolCalls.inc({
          tool: toolLabel(deps.tools, call.name),
          outcome: result.success ? "ok" : "failed",
        });
        // A cancel that came meanwhile answers the calls after it as cancelled (above) instead.
        if (fitted.cut && !signal.aborted) {
          // The tool ran: its result is kept as far as it fits, cut where the note says. The
          // history has no room for more results, so the calls after it do not run.
          await answerNotRun(history, deps, calls.slice(index + 1));
          const error = stepResultsFull(history.messages, { cut: true, notRun: calls.length - index - 1 });
          return { outcome: "budget_exhausted", error, usage };
        }
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
    // The last step was appended on its own (hooks see it first). A cancel that committed while
    // it was out, its signal never come, is read by the statement that ends the run (endRun, as
    // the ending append does for a deferred step): the run ends `cancelled` there, not `outcome`,
    // and its event, metric and hooks say so (end-run.ts). No read of its own here.
    return { outcome, usage };
  }
}

/** Why a run that has gone on past FLEET_RUN_MAX_MS ends (pure); undefined: it may go on. */
export function runOvertime(
  began: number,
  now: number,
  maxMs: number | undefined,
  turns: number,
): string | undefined {
  if (!maxMs || now - began < maxMs) return undefined;
  return `the run went on for ${Math.round(now - began)} ms (${turns} model steps), past FLEET_RUN_MAX_MS (${maxMs} ms) on this fleet`;
}
