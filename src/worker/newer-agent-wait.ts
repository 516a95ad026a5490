/**
 * A run whose stored agent this worker cannot read only because a newer release wrote it (a
 * rolling deploy: a newer API stored it, this older worker claimed the run; newer-agent.ts
 * tells that from a genuinely invalid agent). Parking the session `invalid_agent` at once made
 * the deploy itself fail sessions for good. So the run is handed back unended, as for a wait
 * for capacity (hand-back.ts): `queued` again with what it did, its job delayed so that a
 * newer worker may take it meanwhile, with one warning line. Each hand-back is counted in the
 * run's usage (`handBacks`), and the first one's time is kept there (`newerAgentSince`): once
 * no worker of the fleet could read the agent for FLEET_NEWER_AGENT_WAIT_MS, the run ends
 * `invalid_agent` and the session is parked naming the field. No model is called meanwhile,
 * and the delay between hand-backs bounds their number (about 30 over the default 15 min).
 */

import type { Logger } from "pino";
import type { NewerAgentError } from "../shared/newer-agent.js";
import { assertNever } from "../shared/resume-point.js";
import type { CapacityWaits } from "../shared/store/capacity-waits.js";
import { type HandBackInput, HandedBack, waitingUsage } from "./hand-back.js";

export type NewerAgentDeps = {
  /** FLEET_NEWER_AGENT_WAIT_MS: how long the fleet waits for a worker that reads the agent. */
  waitMs: number;
  waits: Pick<CapacityWaits, "handBackNewerAgent">;
};

/** The delay before a handed-back run comes back: a tenth of the wait, from 1 s to 30 s (pure). */
export function newerAgentDelayMs(waitMs: number): number {
  return Math.min(30_000, Math.max(1_000, Math.floor(waitMs / 10)));
}

/** The detail a session is parked with once the wait is over (pure). */
export function newerAgentParkDetail(error: NewerAgentError, waitedMs: number): string {
  const waited =
    waitedMs >= 60_000 ? `${Math.round(waitedMs / 60_000)} min` : `${Math.round(waitedMs / 1000)} s`;
  return `${error.message} (no worker of this fleet could read this agent for ${waited}, FLEET_NEWER_AGENT_WAIT_MS: written by a newer release that no longer runs?)`;
}

/**
 * Hands the run back (throws HandedBack), or answers how it ends instead: `expired` with the
 * detail to park with, `cancelled` (its session was cancelled meanwhile), `not_running`.
 */
export async function handBackNewerAgent(
  error: NewerAgentError,
  input: HandBackInput,
  newer: NewerAgentDeps,
  log: Pick<Logger, "warn">,
): Promise<{ outcome: "expired"; detail: string } | { outcome: "cancelled" | "not_running" }> {
  const usage = waitingUsage(input);
  const handed = await newer.waits.handBackNewerAgent(input.fence, input.run.id, usage, newer.waitMs);
  switch (handed.outcome) {
    case "expired":
      return { outcome: "expired", detail: newerAgentParkDetail(error, handed.waitedMs) };
    case "cancelled":
    case "not_running":
      return { outcome: handed.outcome };
    case "handed":
      break;
    default:
      return assertNever(handed);
  }
  const delayMs = newerAgentDelayMs(newer.waitMs);
  log.warn(
    {
      sessionId: input.fence.sessionId,
      runId: input.run.id,
      unknown: error.unknown,
      detail: error.message,
      handBacks: usage.handBacks,
      delayMs,
    },
    "agent has settings this worker does not know (written by a newer release?): run handed back for a newer worker",
  );
  throw new HandedBack(input.run.id, delayMs, "newer_agent");
}
