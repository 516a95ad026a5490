/**
 * Tool time limits (pure): which limit a call gets and what its answer says when the tool
 * does not finish within it. The waiting itself is `executeTool`'s (execute-tool.ts).
 */

/** The longest delay a Node timer takes (a longer one fires at once): the most any limit may be. */
export const MAX_TIMER_MS = 2_147_483_647;

/** FLEET_TOOL_TIMEOUT_MS's default: 10 min (README "Agents, models and tools"). */
export const DEFAULT_TOOL_TIMEOUT_MS = 600_000;

/**
 * The time limit of one call in ms, or null for none. The tool's own `timeoutMs` (operator
 * code; 0: none) replaces the fleet's FLEET_TOOL_TIMEOUT_MS (0: none); the agent's
 * `toolTimeoutMs` (a caller's) may only shorten what the operator allows, never lengthen it:
 * the operator's limit is what keeps one session from holding a worker slot every tenant shares.
 */
export function toolTimeLimit(
  fleetMs: number,
  toolMs: number | undefined,
  agentMs: number | undefined,
): number | null {
  const operator = toolMs ?? fleetMs;
  const limits = [operator, agentMs ?? 0].filter((ms) => ms > 0);
  return limits.length === 0 ? null : Math.min(...limits);
}

/** Whether `ms` may be a tool's `timeoutMs` or FLEET_TOOL_TIMEOUT_MS (0: none). */
export function isTimeLimit(ms: unknown): ms is number {
  return typeof ms === "number" && Number.isInteger(ms) && ms >= 0 && ms <= MAX_TIMER_MS;
}

/**
 * The result of a call whose tool did not finish within its limit: a failed result the model
 * reads (not the interrupted text of resume-semantics §3, which is for a crash).
 */
export function toolTimedOutText(limitMs: number): string {
  return `the tool did not finish within ${limitMs} ms (its time limit): it was asked to stop, and whatever it changes may or may not have happened`;
}
