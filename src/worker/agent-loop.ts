/**
 * The agent loop of one run: call the model, append its step, run the tools it asked for
 * and append each result as it finishes, until a normal answer, an abnormal stop, the
 * turn limit or an abort. Every append is fenced; a FencedError ends the loop at once.
 */
import type { AgentConfig } from "../shared/agent-config.js";
import type { Message, StoredMessage, ToolCall, ToolMessage, Usage } from "../shared/messages.js";
import type { FleetMetrics } from "../shared/metrics.js";
import { requestsTools } from "../shared/resume-point.js";
import { stopReasonLabel } from "../shared/stop-reasons.js";
import type { Fence, FencedWrites, HistoryCursor } from "../shared/store/fenced-writes.js";
import { lastStepSeq } from "../shared/store/rows.js";
import { tailState } from "../shared/tail-state.js";
import { callModel, type RetryPolicy } from "./call-model.js";
import type { ModelProvider } from "./models/provider.js";
import type { Sleep } from "./models/scripted.js";
import { outcomeOfStop, type RunOutcome } from "./run-outcome.js";
import { executeTool, type ToolRegistry } from "./tools/registry.js";

export type AgentLoopDeps = {
  writes: Pick<FencedWrites, "append">;
  tools: Pick<ToolRegistry, "get" | "specs">;
  metrics: Pick<FleetMetrics, "modelStops" | "toolCalls">;
  sleep: Sleep;
  retryPolicy?: RetryPolicy;
};

export type LoopInput = {
  fence: Fence;
  runId: string;
  agent: AgentConfig;
  model: ModelProvider;
  /** The history as stored, including what the run appended when it started. */
  history: StoredMessage[];
  signal: AbortSignal;
};

export type LoopResult = { outcome: RunOutcome; error?: string; usage: Usage };

/** An in-memory history that appends through the fence and keeps its cursor. */
class FencedHistory {
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

  async append(message: Message): Promise<void> {
    const next = [...this.input.history, message];
    const [stored] = await this.deps.writes.append(
      this.input.fence,
      this.cursor(),
      this.input.runId,
      [message],
      tailState(next),
    );
    this.input.history.push(stored!);
  }
}

/** The result of a call that was never started because its run was cancelled. */
export const CANCELLED_BEFORE_START_TEXT =
  "Cancelled: the run was stopped before this tool started, so it did not run.";

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
  const toolSpecs = deps.tools.specs(agent.tools);
  const usage: Usage = { inputTokens: 0, outputTokens: 0 };
  let pauses = 0;
  for (let turn = 0; ; turn++) {
    if (signal.aborted) return { outcome: "cancelled", usage };
    if (turn >= agent.maxTurns) return { outcome: "max_turns", usage };
    const step = await callModel(
      input.model,
      {
        sessionId: input.fence.sessionId,
        system: agent.system,
        history: history.messages,
        tools: toolSpecs,
        signal,
      },
      { sleep: deps.sleep, policy: deps.retryPolicy },
    );
    if (!step.ok) return { outcome: step.aborted ? "cancelled" : "provider_error", error: step.error, usage };
    const message = step.message;
    if (message.usage) {
      usage.inputTokens += message.usage.inputTokens;
      usage.outputTokens += message.usage.outputTokens;
    }
    await history.append(message);
    deps.metrics.modelStops.inc({ stop_reason: stopReasonLabel(message.stopReason) });
    if (requestsTools(message)) {
      pauses = 0;
      const calls = message.toolCalls ?? [];
      for (const [index, call] of calls.entries()) {
        if (signal.aborted) {
          // Answer the calls that never started, so the history says exactly what happened.
          for (const skipped of calls.slice(index)) await history.append(cancelledResult(skipped));
          for (const skipped of calls.slice(index))
            deps.metrics.toolCalls.inc({ tool: skipped.name, outcome: "failed" });
          return { outcome: "cancelled", usage };
        }
        // Ownership was proven right before this side effect: the assistant step (or the
        // previous call's result) was just appended through the fence, so a fenced-out
        // worker has already stopped with a FencedError and runs nothing.
        const result = await executeTool(deps.tools.get(call.name), call.name, call.arguments, {
          callId: call.id,
          sessionId: input.fence.sessionId,
          signal,
        });
        const toolMessage: ToolMessage = {
          role: "tool",
          toolCallId: call.id,
          name: call.name,
          content:
            !result.success && signal.aborted ? `Cancelled while running: ${result.content}` : result.content,
          success: result.success,
        };
        await history.append(toolMessage);
        deps.metrics.toolCalls.inc({ tool: call.name, outcome: result.success ? "ok" : "failed" });
      }
      continue;
    }
    const outcome = outcomeOfStop(message.stopReason);
    if (outcome === "paused" && pauses < agent.pauseLimit) {
      pauses++;
      continue;
    }
    return { outcome, usage };
  }
}
