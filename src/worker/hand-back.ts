/**
 * Handing a waiting run back (contracts §15), for session-job.ts: a run whose model request
 * must wait for its endpoint longer than the gate allows stops without ending — its row goes
 * back to `queued` with what it did so far (capacity-waits.ts), the session's lease is
 * released as at any job's end, and the job moves to BullMQ's delayed set (worker.ts) until
 * its place on the endpoint's calendar comes. The worker that takes the job next continues
 * the same run: no user message again, `maxTurns` counted from what the run already did,
 * its usage summed, its waits in `usage.waitedMs`. No attempt limit, budget or parking sees it.
 */
import type { ModelConfig } from "../shared/agent-config.js";
import type { RunRow } from "../shared/db/schema.js";
import type { RunUsage, StoredMessage, Usage } from "../shared/messages.js";
import { gateEndpointOf, type ModelEndpoint } from "../shared/model-endpoints.js";
import { roundUsd } from "../shared/prices.js";
import type { CapacityWaits, WaitingUsage } from "../shared/store/capacity-waits.js";
import { isHandedBack } from "../shared/store/capacity-waits.js";
import type { Fence } from "../shared/store/fenced-writes.js";
import { type CapacityWait, type EndpointGateDeps, gatedModel, type WaitLedger } from "./endpoint-gate.js";
import type { ModelProvider } from "./models/provider.js";
import type { RunStart } from "./start-run.js";

export type CapacityDeps = {
  waits: Pick<CapacityWaits, "handBack">;
  gate: EndpointGateDeps;
  endpoints: ReadonlyMap<string, ModelEndpoint>;
};

/**
 * Thrown out of processRun once the run is handed back: the job is to wait `delayMs`. `why`:
 * its endpoint has no capacity yet, or its agent was written by a newer release (newer-agent-wait.ts).
 */
export class HandedBack extends Error {
  override name = "HandedBack";
  constructor(
    readonly runId: string,
    readonly delayMs: number,
    readonly why: "capacity" | "newer_agent" = "capacity",
  ) {
    super(
      `run ${runId} handed back for ${delayMs} ms: ${why === "capacity" ? "its endpoint has no capacity yet" : "its agent was written by a newer release"}`,
    );
  }
}

/** What a handed-back run did before (null for a run that starts). */
export function previousPart(run: RunRow, capacity: CapacityDeps | undefined): WaitingUsage | null {
  if (!capacity || !isHandedBack(run)) return null;
  return (run.usage as WaitingUsage | null) ?? { inputTokens: 0, outputTokens: 0 };
}

/** The start of a handed-back run: nothing to append, nothing new to count. */
export const CONTINUE: RunStart = { action: "start", appends: [], resumeKind: null, interruptedCalls: [] };

/** The wait ledger of a run, carried over from its previous part. */
export function ledgerOf(previous: WaitingUsage | null): WaitLedger {
  return {
    waitedMs: previous?.waitedMs ?? 0,
    ...(previous?.askedAt === undefined ? {} : { askedAt: previous.askedAt }),
  };
}

/**
 * `model` behind its endpoint's gate when its requests go to a declared endpoint: the one it
 * names, or the one with its destination and key (model-endpoints.ts `gateEndpointOf`).
 */
export function withCapacityGate(
  model: ModelProvider,
  config: ModelConfig,
  run: RunRow,
  ledger: WaitLedger,
  capacity: CapacityDeps | undefined,
): ModelProvider {
  if (!capacity) return model;
  const endpoint = gateEndpointOf(config, capacity.endpoints);
  if (!endpoint) return model;
  ledger.gated = true;
  // A handed-back run's request still counts as waiting there until it is granted.
  if (ledger.askedAt !== undefined) ledger.waitingOn = endpoint.name;
  return gatedModel(
    model,
    { endpoint: endpoint.name, limits: endpoint.limits, tenant: run.tenant, request: run.id, ledger },
    capacity.gate,
  );
}

function addUsage(total: RunUsage, step: RunUsage): RunUsage {
  const sum: RunUsage = {
    ...total,
    inputTokens: total.inputTokens + step.inputTokens,
    outputTokens: total.outputTokens + step.outputTokens,
  };
  for (const key of ["cacheReadTokens", "cacheWriteTokens", "reasoningTokens", "unknownSteps"] as const)
    if (step[key] !== undefined) sum[key] = (total[key] ?? 0) + step[key];
  if (step.costUsd !== undefined) sum.costUsd = roundUsd((total.costUsd ?? 0) + step.costUsd);
  return sum;
}

function plainUsage(usage: WaitingUsage | null): RunUsage {
  if (!usage) return { inputTokens: 0, outputTokens: 0 };
  const { waitedMs: _w, handBacks: _h, turns: _t, askedAt: _a, newerAgentSince: _n, ...rest } = usage;
  return rest;
}

/** The usage of the messages a part of a run committed (its assistant steps). */
export function committedUsage(committed: readonly StoredMessage[]): { usage: RunUsage; steps: number } {
  let usage: RunUsage = { inputTokens: 0, outputTokens: 0 };
  let steps = 0;
  for (const message of committed) {
    if (message.role !== "assistant") continue;
    steps++;
    usage = addUsage(usage, message.usage ?? { inputTokens: 0, outputTokens: 0, unknownSteps: 1 });
  }
  return { usage, steps };
}

/**
 * The usage of a part of a run: its committed steps', and what the failed attempts of the
 * request that waits were billed for (`CapacityWait.billed`), which no step holds.
 */
export function partUsage(committed: readonly StoredMessage[], billed: Usage | undefined): RunUsage {
  const { usage } = committedUsage(committed);
  return billed ? addUsage(usage, billed) : usage;
}

/** What a run handed back carries: its usage so far, one more hand-back, its model calls so far. */
export function waitingUsage(input: {
  committed: readonly StoredMessage[];
  previous: WaitingUsage | null;
  ledger: WaitLedger;
  billed?: Usage;
}): WaitingUsage {
  const part = committedUsage(input.committed);
  return {
    ...addUsage(plainUsage(input.previous), partUsage(input.committed, input.billed)),
    waitedMs: input.ledger.waitedMs,
    handBacks: (input.previous?.handBacks ?? 0) + 1,
    turns: (input.previous?.turns ?? 0) + part.steps,
  };
}

/** What a hand-back stores of a running run (handBack, and newer-agent-wait.ts). */
export type HandBackInput = {
  fence: Fence;
  run: RunRow;
  /** The messages this part of the run committed. */
  committed: readonly StoredMessage[];
  previous: WaitingUsage | null;
  ledger: WaitLedger;
  /** What the failed attempts of the request that waits were billed for (`CapacityWait.billed`). */
  billed?: Usage;
};

/**
 * Hands the run back; throws HandedBack (the job waits). Otherwise its request waits no more
 * (forgotten at once, not once its place has passed), and the answer says why:
 * - `cancelled`: its session was cancelled meanwhile (contracts §9); the caller ends the run
 *   `cancelled` (a hand-back would have queued it on the cancelled session, to go on later);
 * - `not_running`: the run was no longer running (another holder took the session: the
 *   caller goes on as it would).
 */
export async function handBack(
  wait: CapacityWait,
  input: HandBackInput & {
    /** Whether the request that waits had a model call counted against `agent.budget.maxModelCalls`. */
    reservedModelCall: boolean;
  },
  capacity: CapacityDeps,
): Promise<"cancelled" | "not_running"> {
  const waiting: WaitingUsage = { ...waitingUsage(input), askedAt: wait.askedAt };
  const outcome = await capacity.waits.handBack(input.fence, input.run.id, waiting, {
    unreserveModelCall: input.reservedModelCall,
  });
  if (outcome === "handed") throw new HandedBack(input.run.id, wait.retryInMs);
  await forgetWaiting(input.ledger, input.run, capacity);
  return outcome;
}

/**
 * Forgets the run's refused request where it waits (`WaitLedger.waitingOn`), if any: its
 * tenant stops counting it at once. For a run that ends, or is not handed back, that way.
 */
export async function forgetWaiting(
  ledger: WaitLedger,
  run: Pick<RunRow, "id" | "tenant">,
  capacity: CapacityDeps | undefined,
): Promise<void> {
  if (ledger.waitingOn === undefined || !capacity) return;
  await capacity.gate.limits.forget(ledger.waitingOn, run.tenant, [run.id]).catch(() => {});
  ledger.waitingOn = undefined;
}

/** The run's usage at its end: its earlier parts' and this part's, with `waitedMs`. */
export function finalUsage(part: RunUsage, previous: WaitingUsage | null, ledger: WaitLedger): RunUsage {
  const total = previous ? addUsage(plainUsage(previous), part) : part;
  if (!ledger.gated && !previous) return total;
  const handBacks = previous?.handBacks ?? 0;
  return { ...total, waitedMs: ledger.waitedMs, ...(handBacks > 0 ? { handBacks } : {}) } as Usage;
}

/** `maxTurns` left to a handed-back run. */
export function turnsTaken(previous: WaitingUsage | null): number {
  return previous?.turns ?? 0;
}
