/**
 * A cancel whose signal no worker read (contracts §9; worker-signals.ts `cancelChannel` lost:
 * a Redis hiccup, the worker's subscriber reconnecting), made on purpose while a run's model
 * call is out. `holdModelCall` holds a session's next scripted model call in a worker running
 * in the test's process until the test releases it; `cancelUnheard` is the API's cancel
 * statement (batch-cancel.ts) with nothing published; `storedEvents` reads what the session's
 * event stream holds. No timing: the test acts once the call is reached, then lets it answer.
 */
import { onTestFinished } from "vitest";
import type { Database } from "../../src/shared/db/client.js";
import { eventStreamKey } from "../../src/shared/events.js";
import { cancelSessions } from "../../src/shared/store/batch-cancel.js";
import type { ModelRequest } from "../../src/worker/models/provider.js";
import { ScriptedModel } from "../../src/worker/models/scripted.js";
import { type FleetEnv, waitFor } from "./fleet-env.js";

let holding = false;

export type HeldModelCall = {
  /** Resolves once the worker made the held call (its answer not yet streamed). */
  reached: Promise<void>;
  /** Lets the held call answer as its script says. */
  release: () => void;
};

/**
 * Holds the next scripted model call of `sessionId` (other sessions' calls, and this session's
 * later ones, go on) until `release()`. One hold at a time, called in a test: the scripted model
 * is put back as it was when the test finishes.
 */
export function holdModelCall(sessionId: string): HeldModelCall {
  if (holding) throw new Error("holdModelCall: one hold at a time");
  holding = true;
  const prototype = ScriptedModel.prototype;
  const stream = prototype.stream;
  let seen!: () => void;
  const reached = new Promise<void>((resolve) => {
    seen = resolve;
  });
  let release!: () => void;
  const released = new Promise<void>((resolve) => {
    release = resolve;
  });
  let taken = false;
  prototype.stream = function (this: ScriptedModel, request: ModelRequest) {
    if (taken || request.sessionId !== sessionId) return stream.call(this, request);
    taken = true;
    const model = this;
    return (async function* () {
      seen();
      await released;
      yield* stream.call(model, request);
    })();
  };
  onTestFinished(() => {
    release();
    prototype.stream = stream;
    holding = false;
  });
  return { reached, release };
}

/** The API's cancel of `sessionId` with its signal lost: the runs it found running. */
export async function cancelUnheard(database: Database, sessionId: string): Promise<string[]> {
  const [row] = await database.sql<{ tenant: string }[]>`select tenant from sessions where id = ${sessionId}`;
  const cancel = await cancelSessions(database, row!.tenant, { sessionId });
  return cancel.running.map((run) => run.id);
}

/** The events the session's stream holds, in order (their `data`, parsed). */
export async function storedEvents(fleet: FleetEnv, sessionId: string): Promise<Record<string, unknown>[]> {
  const stream = await fleet.redis.xrange(eventStreamKey(fleet.config.prefix, sessionId), "-", "+");
  return stream.map(([, f]) => JSON.parse(f[f.indexOf("data") + 1]!) as Record<string, unknown>);
}

/**
 * The session's events once the run `runId`'s RUN_COMPLETED is among them. A worker without
 * hooks writes it after the run's row is ended (and after counting it in fleet_runs_total)
 * without waiting for it: a test that read right after `waitForRun` could miss it.
 */
export async function eventsOnceEnded(
  fleet: FleetEnv,
  sessionId: string,
  runId: string,
): Promise<Record<string, unknown>[]> {
  let events: Record<string, unknown>[] = [];
  await waitFor(
    async () => {
      events = await storedEvents(fleet, sessionId);
      return events.some((e) => e.type === "RUN_COMPLETED" && e.runId === runId);
    },
    10_000,
    `RUN_COMPLETED of ${runId}`,
  );
  return events;
}
