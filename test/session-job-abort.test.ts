/**
 * A job aborted (a cancel through the API, a shutdown) while it is still taking the session's
 * lease: the abort came before the job listened for it, so it must be seen when it starts
 * listening, and the queued run it claims must not be started (session-job.ts).
 */
import pino from "pino";
import { describe, expect, it } from "vitest";
import type { RunRow } from "../src/shared/db/schema.js";
import type { Claim } from "../src/shared/store/fenced-writes.js";
import type { SessionJobDeps } from "../src/worker/job-deps.js";
import { processSessionJob } from "../src/worker/session-job.js";

function depsAbortingDuringAcquire(outer: AbortController) {
  const calls: string[] = [];
  const queued = { id: "r-1", sessionId: "s-1", kind: "run", status: "queued" } as unknown as RunRow;
  const claim: Claim = {
    epoch: 1,
    agent: {},
    tokensUsed: 0,
    sessionEvents: false,
    staleRunIds: [],
    staleRuns: [],
    next: queued,
    history: [],
    historyRead: 0,
    started: null,
  };
  const refuse = (name: string) => async () => {
    calls.push(name);
    throw new Error(`${name} was called for a job aborted before it claimed`);
  };
  const deps = {
    workerId: "w-1",
    leaseTtlMs: 60_000,
    lease: {
      acquire: async () => {
        // The cancel arrives while the acquire is on its way to Redis.
        outer.abort(new Error("session cancelled"));
        return "token";
      },
      renew: async () => true,
      release: async () => {
        calls.push("release");
        return true;
      },
    },
    writes: {
      claimSession: async () => {
        calls.push("claimSession");
        return claim;
      },
      startRun: refuse("startRun"),
      append: refuse("append"),
      endRun: refuse("endRun"),
      reserveModelCall: refuse("reserveModelCall"),
      countBilledTokens: refuse("countBilledTokens"),
    },
    queries: { nextQueuedRun: async () => null },
    metrics: {},
    log: pino({ level: "silent" }),
  } as unknown as SessionJobDeps;
  return { deps, calls };
}

describe("a job aborted while it takes the lease", () => {
  it("sees the abort and starts no run", async () => {
    const outer = new AbortController();
    const { deps, calls } = depsAbortingDuringAcquire(outer);
    await expect(processSessionJob("s-1", outer.signal, deps)).resolves.toBe("done");
    expect(calls).toEqual(["claimSession", "release"]);
  });
});
