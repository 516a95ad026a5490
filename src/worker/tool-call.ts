/**
 * One tool call of a run, within its time limit (tools/time-limit.ts): a call past it is
 * counted in `fleet_tool_timeouts_total` and logged, and so is a result its tool gives after
 * the call was answered (discarded: never stored, one result per call). A call answered while
 * its tool still runs (deaf to its signal) counts in `fleet_tools_abandoned` until it ends.
 */
import type { Logger } from "pino";
import type { AgentConfig } from "../shared/agent-config.js";
import type { ToolCall } from "../shared/messages.js";
import type { FleetMetrics } from "../shared/metrics.js";
import type { Fence } from "../shared/store/fenced-writes.js";
import { loggable } from "./hook-errors.js";
import { executeTool, type ToolOutcome } from "./tools/execute-tool.js";
import { callKeyOf, type Tool, type ToolRegistry, toolLabel } from "./tools/registry.js";
import { toolTimeLimit } from "./tools/time-limit.js";

export type ToolCallDeps = {
  tools: Pick<ToolRegistry, "get">;
  metrics: Partial<Pick<FleetMetrics, "toolTimeouts" | "toolsAbandoned">>;
  /** FLEET_TOOL_TIMEOUT_MS: a call's time limit unless its tool has its own (0 or absent: none). */
  toolTimeoutMs?: number;
  /** Where a timed-out call and a result discarded after it are logged; absent: nowhere. */
  log?: Pick<Logger, "warn">;
};

/**
 * `tool`: undefined for a name the agent does not list (nothing runs). `onStarted`: when the
 * tool starts running (never for a call whose tool does not run: execute-tool.ts).
 */
export async function runToolCall(
  tool: Tool | undefined,
  call: ToolCall,
  run: {
    fence: Fence;
    runId: string;
    agent: Pick<AgentConfig, "toolTimeoutMs">;
    signal: AbortSignal;
    /** The seq of the assistant step that asked for the call (its `callKey`). */
    stepSeq: number;
  },
  deps: ToolCallDeps,
  onStarted?: () => void,
): Promise<ToolOutcome> {
  const { sessionId } = run.fence;
  const timeoutMs = tool
    ? toolTimeLimit(deps.toolTimeoutMs ?? 0, tool.timeoutMs, run.agent.toolTimeoutMs)
    : null;
  const label = { tool: toolLabel(deps.tools, call.name) };
  const fields = { sessionId, runId: run.runId, tool: call.name, toolCallId: call.id, timeoutMs };
  const result = await executeTool(
    tool,
    call.name,
    call.arguments,
    { callId: call.id, callKey: callKeyOf(sessionId, run.stepSeq, call.id), sessionId, signal: run.signal },
    {
      timeoutMs,
      onStarted,
      onLate: (late) =>
        deps.log?.warn(
          { ...fields, ...late },
          "tool result after its time limit discarded (the call was answered as timed out)",
        ),
      onListenerFailed: (error) => {
        try {
          deps.log?.warn(
            { ...fields, err: loggable(error) },
            "tool abort listener failed (its clean-up threw when its signal was aborted; the call is answered as it would have been)",
          );
        } catch {
          // A value that cannot be read (a revoked proxy): said without it; never a throw here.
          deps.log?.warn(fields, "tool abort listener failed (with a value that cannot be read)");
        }
      },
      onAbandoned: (settles) => {
        deps.metrics.toolsAbandoned?.inc(label);
        void settles.then(() => deps.metrics.toolsAbandoned?.dec(label));
      },
    },
  );
  if (result.timedOut) {
    deps.metrics.toolTimeouts?.inc(label);
    deps.log?.warn({ ...fields, ...result.timedOut }, "tool call timed out");
  }
  return result;
}
