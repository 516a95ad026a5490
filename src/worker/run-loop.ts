/**
 * The middle of a run (process-run.ts): its agent loop on its model, behind the endpoint's
 * capacity gate — or the result of a run that stops before or inside it: a `beforeRun` that
 * threw, a wait for capacity that handed the run back and found the session cancelled, an
 * invalid stored agent, output Postgres refused. Infrastructure faults propagate.
 */
import { parseAgentConfig, parseModelConfig } from "../shared/agent-config.js";
import { ValidationError } from "../shared/errors.js";
import { NewerAgentError } from "../shared/newer-agent.js";
import { runAgentLoop } from "./agent-loop.js";
import { CapacityWait } from "./endpoint-gate.js";
import { pausesTaken } from "./goal-rounds.js";
import { finalUsage, forgetWaiting, handBack, partUsage, turnsTaken, withCapacityGate } from "./hand-back.js";
import { unreportedPrice } from "./loop-budget.js";
import { withProviderErrorLog } from "./models/logged-provider.js";
import { handBackNewerAgent } from "./newer-agent-wait.js";
import { withDeltas } from "./run-events.js";
import { logStorageRejection, storageRejection, storageRejectionText } from "./run-outcome.js";
import type { StartedRun } from "./run-state.js";

export type LoopResult = Awaited<ReturnType<typeof runAgentLoop>>;

/** Runs the started run's agent loop; returns how it ended, its usage final (hand-backs included). */
export async function runLoop(started: StartedRun): Promise<LoopResult> {
  const { run, state, signal, deps, kind, logFields, previous, ledger, before, ctx, hookFailure, observer } =
    started;
  const { fence, history, agent: storedAgent, budget, events } = state;
  let reservesModelCalls = false;
  let result: LoopResult;
  try {
    if (hookFailure) {
      // A beforeRun that throws ends the run failed, and nothing is sent to the model (contracts §8).
      result = { outcome: "failed", error: hookFailure, usage: { inputTokens: 0, outputTokens: 0 } };
    } else {
      state.parsedAgent ??= deps.agents ? deps.agents.parse(storedAgent) : parseAgentConfig(storedAgent);
      const parsed = state.parsedAgent;
      // A handed-back run has made some of its model calls already (maxTurns is per run).
      const agent = previous ? { ...parsed, maxTurns: parsed.maxTurns - turnsTaken(previous) } : parsed;
      reservesModelCalls = agent.budget?.maxModelCalls !== undefined;
      // A resume's own model is read as the agent is: one a newer release wrote (a provider
      // this worker does not know) is handed back below, not failed as an outage would be.
      const runModel = run.model ? parseModelConfig(run.model, "run.model") : null;
      const model = withCapacityGate(
        withDeltas(
          withProviderErrorLog(
            runModel ? deps.models(runModel, "run.model") : deps.models(agent.model, "agent.model"),
            deps.log,
            { runId: run.id, workerId: logFields.workerId },
          ),
          events,
          run.id,
        ),
        runModel ?? agent.model,
        run,
        ledger,
        deps.capacity,
      );
      result = await runAgentLoop(
        {
          fence,
          runId: run.id,
          agent,
          model,
          history,
          signal,
          budget,
          // What the session's unreported tokens cost: at the dearest model it may have used.
          ...(agent.budget?.maxCostUsd === undefined
            ? {}
            : {
                unreportedPrice: unreportedPrice(
                  agent,
                  model,
                  deps.models,
                  (await deps.queries.runModels?.(fence.sessionId)) ?? [],
                ),
              }),
          observer,
          // Goal mode belongs to the request that asked for it: never to a resume (contracts §8).
          goal: kind === "run" ? (run.goal ?? null) : null,
          // A handed-back run is the same request: its pauses so far still count (pauseLimit).
          pausesTaken: previous ? pausesTaken(history, turnsTaken(previous)) : 0,
          // The last step is stored with the run's end, in one statement, when no hook must see it first.
          deferLast: !ctx && deps.writes.appendAndEndRun !== undefined,
        },
        deps,
      );
    }
  } catch (error) {
    // Waiting for capacity is not failing (contracts §15): the run is handed back, unended.
    // A run whose session was cancelled meanwhile ends `cancelled` instead.
    const committed = history.slice(before.length);
    // An agent a newer release wrote (a rolling deploy) waits for a worker that reads it.
    const newer =
      error instanceof NewerAgentError && deps.newerAgents && deps.capacity
        ? await handBackNewerAgent(
            error,
            { fence, run, committed, previous, ledger },
            deps.newerAgents,
            deps.log,
          )
        : null;
    // What the waiting request's failed attempts were billed for: in the run's usage too.
    const billed = error instanceof CapacityWait ? error.billed : undefined;
    const handed =
      error instanceof CapacityWait && deps.capacity
        ? await handBack(
            error,
            { fence, run, committed, previous, ledger, billed, reservedModelCall: reservesModelCalls },
            deps.capacity,
          )
        : (newer?.outcome ?? null);
    if (handed === "cancelled") result = { outcome: "cancelled", usage: partUsage(committed, billed) };
    else if (newer?.outcome === "expired")
      result = { outcome: "invalid_agent", error: newer.detail, usage: { inputTokens: 0, outputTokens: 0 } };
    else {
      // Infrastructure faults (Postgres, Redis) propagate: the job is retried, and what
      // follows is an automatic resume counted against the session's limit. A configuration
      // problem (an invalid stored agent) and a write Postgres refuses for its content would
      // fail the same way every time: they end the run and park the session at once.
      const outcome = error instanceof ValidationError ? "invalid_agent" : storageRejection(error);
      if (!outcome) {
        await forgetWaiting(ledger, run, deps.capacity);
        throw error;
      }
      if (outcome === "storage_rejected") logStorageRejection(deps.log, logFields, error);
      const text = outcome === "storage_rejected" ? storageRejectionText(error) : (error as Error).message;
      result = { outcome, error: text, usage: { inputTokens: 0, outputTokens: 0 } };
    }
  }
  // However the run ended, a request of its that was refused waits no more: its tenant stops
  // counting it at once (a run aborted while it asked, or cancelled as it was handed back).
  await forgetWaiting(ledger, run, deps.capacity);
  return { ...result, usage: finalUsage(result.usage, previous, ledger) };
}
