/**
 * A cancel's signal to the workers (worker-signals.ts `cancelChannel`) that arrives after a new
 * message re-opened the session (contracts §9) and its new run started on the same worker. The
 * signal named the session only, so the worker aborted whatever ran for it: the new run, which
 * ended `cancelled` though nobody cancelled it. Now the signal names the runs the cancel found
 * running, and a worker aborts those only; a signal naming no runs (an older API's, a delete's)
 * still aborts every run of its sessions. A late signal is the very message the API published
 * for the first run, captured on the channel and published again once the new run is in its
 * tool, as a worker reading it late would read it. Real API, worker (in this process),
 * Postgres and Redis.
 */
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { createRedis } from "../src/shared/redis.js";
import { cancelChannel } from "../src/shared/worker-signals.js";
import { RunningJobs } from "../src/worker/running-jobs.js";
import { type RunningWorker, startWorker } from "../src/worker/worker.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

let fleet: FleetEnv;
let client: FleetClient;
let worker: RunningWorker;
let listener: Redis;
/** What the API published on the cancel channel, in order. */
const published: string[] = [];

beforeAll(async () => {
  fleet = await createFleetEnv("cancel-reopened-run");
  ({ client } = await fleet.startApi());
  worker = await startWorker({ ...fleet.config, logLevel: "silent" }, { serveMetrics: false });
  listener = createRedis(fleet.config.redisUrl, "worker");
  listener.on("message", (_channel: string, text: string) => published.push(text));
  await listener.subscribe(cancelChannel(fleet.config.prefix));
}, 60_000);
afterAll(async () => {
  await listener?.quit().catch(() => {});
  await worker?.stop();
  await fleet?.close();
});

/** How many assistant messages the session has stored (each a step the scripted model took). */
async function assistantSteps(sessionId: string): Promise<number> {
  const [row] = await fleet.database.sql<{ n: number }[]>`
    select count(*)::int as n from messages where session_id = ${sessionId} and role = 'assistant'`;
  return row!.n;
}

describe("a cancel's signal read after a new message re-opened the session", () => {
  it("aborts the run it cancelled, never the new run", async () => {
    const agent = {
      model: {
        provider: "scripted" as const,
        steps: [
          // The first run: a sleep the cancel aborts.
          { toolCalls: [{ name: "sleep", arguments: { ms: 600_000 } }] },
          // The new run: a sleep the late signal arrives during, then its answer.
          { toolCalls: [{ name: "sleep", arguments: { ms: 2_000 } }] },
          { text: "done" },
        ],
      },
      tools: ["sleep"],
    };
    const { id } = await client.createSession({ agent });
    const first = await client.send(id, "go");
    await waitFor(async () => (await assistantSteps(id)) === 1, 30_000, "the first run's sleep");
    const cancel = await client.cancelSession(id);
    expect(cancel.cancelled).toBe(true);
    // Only the signal ends a run in a 10-minute sleep: it still reaches the run it cancelled.
    expect((await client.waitForRun(first.runId, { timeoutMs: 30_000 })).endedReason).toBe("cancelled");
    await waitFor(async () => published.length === 1, 10_000, "the cancel's signal");
    expect(JSON.parse(published[0]!)).toEqual({ sessionIds: [id], runIds: [first.runId] });

    const second = await client.send(id, "again");
    await waitFor(async () => (await assistantSteps(id)) === 2, 30_000, "the new run's sleep");
    // The first cancel's signal, read late: the new run is in its tool.
    await fleet.redis.publish(cancelChannel(fleet.config.prefix), published[0]!);
    const run = await client.waitForRun(second.runId, { timeoutMs: 30_000 });
    expect(run.endedReason).toBe("completed");
    expect((await client.getSession(id)).status).not.toBe("cancelled");
  }, 90_000);
});

describe("which jobs a cancel's signal aborts (running-jobs.ts)", () => {
  it("a job on a named run, a job that comes to one later; never a job on another run", () => {
    const jobs = new RunningJobs();
    const onFirst = new AbortController();
    jobs.start("s1", onFirst).onRun("r1");
    const claiming = new AbortController();
    const claimingJob = jobs.start("s1", claiming);
    const onNew = new AbortController();
    jobs.start("s1", onNew).onRun("r2");
    jobs.cancel(["s1"], ["r1"]);
    expect([onFirst.signal.aborted, claiming.signal.aborted, onNew.signal.aborted]).toEqual([
      true,
      false,
      false,
    ]);
    claimingJob.onRun("r1");
    expect(claiming.signal.aborted).toBe(true);
  });

  it("a job still claiming that comes to another run goes on", () => {
    const jobs = new RunningJobs();
    const claiming = new AbortController();
    const job = jobs.start("s1", claiming);
    jobs.cancel(["s1"], ["r1"]);
    job.onRun("r2");
    expect(claiming.signal.aborted).toBe(false);
  });

  it("a signal naming no runs (a delete's, an older API's) aborts every job of its sessions, only theirs", () => {
    const jobs = new RunningJobs();
    const running = new AbortController();
    jobs.start("s1", running).onRun("r1");
    const claiming = new AbortController();
    jobs.start("s1", claiming);
    const other = new AbortController();
    jobs.start("s2", other).onRun("r9");
    jobs.cancel(["s1"], null);
    expect([running.signal.aborted, claiming.signal.aborted, other.signal.aborted]).toEqual([
      true,
      true,
      false,
    ]);
  });

  it("an ended job is no longer reached", () => {
    const jobs = new RunningJobs();
    const ended = new AbortController();
    const job = jobs.start("s1", ended);
    job.onRun("r1");
    job.end();
    jobs.cancel(["s1"], null);
    expect(ended.signal.aborted).toBe(false);
  });
});
