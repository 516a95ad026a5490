/**
 * A job's last hops (session-job.ts): the run's RUN_COMPLETED written to Redis, then the
 * lease released. Both used to be awaited before the job returned, so each session's slot
 * waited for two more round trips after its run had ended in Postgres. A worker now takes
 * them off the slot (`afterJob`): the job returns at once, and the release still waits for
 * the event write, so that whoever takes the session next writes its events after these.
 */
import pino from "pino";
import { describe, expect, it } from "vitest";
import type { RunRow } from "../src/shared/db/schema.js";
import type { EventWriter } from "../src/shared/event-writer.js";
import type { SessionEventInput } from "../src/shared/events.js";
import type { StoredMessage } from "../src/shared/messages.js";
import type { Claim } from "../src/shared/store/fenced-writes.js";
import type { SessionJobDeps } from "../src/worker/job-deps.js";
import type { ModelProvider } from "../src/worker/models/provider.js";
import { processSessionJob } from "../src/worker/session-job.js";

const run = {
  id: "r-1",
  sessionId: "s-1",
  kind: "run",
  status: "queued",
  trigger: "api",
  input: "hi",
  model: null,
  goal: null,
  lastSignAt: null,
} as unknown as RunRow;

/** A model that answers "Done." at once. */
const answering: ModelProvider = {
  async *stream() {
    yield { type: "text", delta: "Done." };
    yield { type: "done", stopReason: "end_turn" };
  },
};

/** Any metric: counted nowhere. */
const metrics = new Proxy({}, { get: () => ({ inc() {}, observe() {} }) });

/**
 * One session whose claim starts its run: the model answers, the answer is stored with the
 * run's end, and the write carrying RUN_COMPLETED waits for `answerEndWrite()`.
 */
function oneRunJob() {
  const calls: string[] = [];
  let answerEndWrite = () => {};
  const endWritten = new Promise<void>((resolve) => {
    answerEndWrite = resolve;
  });
  const user: StoredMessage = { seq: 1, role: "user", content: "hi" } as StoredMessage;
  const claim: Claim = {
    epoch: 1,
    agent: { model: { provider: "scripted", steps: [{ text: "Done." }] } },
    tokensUsed: 0,
    sessionEvents: true,
    staleRunIds: [],
    staleRuns: [],
    next: run,
    history: [],
    historyRead: 0,
    started: [user],
  };
  const events = {
    enabled: true,
    lastSeq: async () => 0,
    // A stream that holds nothing starts at the history's tail (session-event-log.ts startAtTail).
    tailFloor: () => 0,
    startAt: async () => false,
    dropIfStaleInStore: async () => false,
    writeEntries: async (_sessionId: string, entries: SessionEventInput[]) => {
      if (entries.some((e) => e.type === "RUN_COMPLETED")) {
        calls.push("RUN_COMPLETED sent");
        await endWritten;
        calls.push("RUN_COMPLETED written");
      }
      return { ok: true, written: 0, prior: 0, priorFingerprint: null };
    },
  } as unknown as EventWriter;
  const deps = {
    workerId: "w-1",
    leaseTtlMs: 60_000,
    lease: {
      acquire: async () => "token",
      renew: async () => true,
      release: async () => {
        calls.push("release");
        return true;
      },
    },
    writes: {
      claimSession: async () => claim,
      appendAndEndRun: async (
        _fence: unknown,
        _cursor: unknown,
        _runId: string,
        last: { message: object },
      ) => {
        calls.push("run ended");
        return { stored: [{ ...last.message, seq: 2 }], next: null };
      },
    },
    queries: { nextQueuedRun: async () => null },
    events,
    models: () => answering,
    tools: { get: () => undefined, specs: () => [] },
    metrics,
    sleep: async () => {},
    reportStop: async () => {},
    log: pino({ level: "silent" }),
  } as unknown as SessionJobDeps;
  return { deps, calls, answerEndWrite };
}

describe("a job's last event write and lease release", () => {
  it("are taken off the job's slot by afterJob, the release after the write", async () => {
    const { deps, calls, answerEndWrite } = oneRunJob();
    const handed: Promise<void>[] = [];
    deps.afterJob = (closing) => handed.push(closing);
    // The RUN_COMPLETED write is not answered yet, and the job is over all the same.
    await expect(processSessionJob("s-1", new AbortController().signal, deps)).resolves.toBe("done");
    expect(calls).toEqual(["run ended", "RUN_COMPLETED sent"]);
    expect(handed).toHaveLength(1);
    answerEndWrite();
    await handed[0];
    expect(calls).toEqual(["run ended", "RUN_COMPLETED sent", "RUN_COMPLETED written", "release"]);
  });

  it("are waited for by the job itself without afterJob", async () => {
    const { deps, calls, answerEndWrite } = oneRunJob();
    const job = processSessionJob("s-1", new AbortController().signal, deps);
    await new Promise((resolve) => setImmediate(resolve));
    answerEndWrite();
    await expect(job).resolves.toBe("done");
    expect(calls).toEqual(["run ended", "RUN_COMPLETED sent", "RUN_COMPLETED written", "release"]);
  });

  it("are not handed off by a job that failed: it releases the lease before it throws", async () => {
    const { deps, calls } = oneRunJob();
    const handed: Promise<void>[] = [];
    deps.afterJob = (closing) => handed.push(closing);
    deps.writes.claimSession = async () => {
      throw new Error("Postgres away");
    };
    await expect(processSessionJob("s-1", new AbortController().signal, deps)).rejects.toThrow(
      "Postgres away",
    );
    expect(calls).toEqual(["release"]);
    expect(handed).toHaveLength(0);
  });
});
