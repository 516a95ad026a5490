/**
 * RunQueues.jobStates against a real Redis: what the sweeper reads, in one script call, of the
 * jobs of queued runs — missing, finished (completed or failed) or pending (waiting, delayed, active).
 */
import { randomUUID } from "node:crypto";
import { UnrecoverableError, Worker } from "bullmq";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { QUEUES, RunQueues } from "../src/shared/queues.js";
import { closeRedis, createRedis } from "../src/shared/redis.js";

const REDIS_URL = process.env.TEST_REDIS_URL ?? "redis://127.0.0.1:6379";

describe("RunQueues.jobStates", () => {
  const prefix = `fleet-test-jobstates-${randomUUID().slice(0, 8)}`;
  const redis = createRedis(REDIS_URL, "producer");
  let queues: RunQueues;

  beforeAll(() => {
    queues = new RunQueues(redis, prefix);
  });

  afterAll(async () => {
    await queues.close();
    const keys = await redis.keys(`${prefix}:*`);
    if (keys.length > 0) await redis.del(...keys);
    await closeRedis(redis);
  });

  it("tells missing, pending and finished jobs apart", async () => {
    const run = (n: number) => ({ sessionId: `s${n}`, runId: `r${n}` });
    const ids = [1, 2, 3, 4, 5].map((n) => QUEUES.runs.jobId(run(n)));
    expect(await queues.jobStates("run", ids)).toEqual([
      "missing",
      "missing",
      "missing",
      "missing",
      "missing",
    ]);
    await queues.enqueue("run", run(1));
    await queues.enqueue("run", run(2), { delayMs: 60_000 });
    await queues.enqueue("run", run(3), { priority: 7 });
    expect(await queues.jobStates("run", ids)).toEqual([
      "pending",
      "pending",
      "pending",
      "missing",
      "missing",
    ]);

    // A worker completes run 4's job and fails run 5's for good.
    await queues.enqueue("run", run(4));
    await queues.enqueue("run", run(5));
    const connection = createRedis(REDIS_URL, "worker");
    const worker = new Worker(
      QUEUES.runs.name,
      async (job) => {
        if (job.id === ids[4]) throw new UnrecoverableError("bad");
        return "ok";
      },
      { connection, prefix, concurrency: 5 },
    );
    try {
      await waitUntil(async () => {
        const states = await queues.jobStates("run", ids);
        return states[3] === "finished" && states[4] === "finished";
      });
    } finally {
      await worker.close();
      await closeRedis(connection);
    }
    expect(await queues.jobStates("run", ids)).toEqual([
      "finished",
      "pending",
      "finished",
      "finished",
      "finished",
    ]);
    expect(await queues.jobStates("resume", ids)).toEqual([
      "missing",
      "missing",
      "missing",
      "missing",
      "missing",
    ]);
    expect(await queues.jobStates("run", [])).toEqual([]);
  });

  it("reads a page of 500 jobs' standing in one command", async () => {
    const run = (n: number) => ({ sessionId: `p${n}`, runId: `rp${n}` });
    const ids = Array.from({ length: 500 }, (_, n) => QUEUES.runs.jobId(run(n)));
    await queues.runs.addBulk([0, 1, 2].map((n) => ({ name: "run", data: run(n), opts: { jobId: ids[n] } })));
    // Every command the queue's connection sends passes here, pipelined ones too.
    const sent = vi.spyOn(redis, "sendCommand");
    try {
      const states = await queues.jobStates("run", ids);
      expect(states.slice(0, 4)).toEqual(["pending", "pending", "pending", "missing"]);
      expect(states.filter((s) => s === "missing")).toHaveLength(497);
      // Before: a pipeline of three commands per job (1,500).
      expect(sent).toHaveBeenCalledTimes(1);
    } finally {
      sent.mockRestore();
    }
  });
});

async function waitUntil(check: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error("timed out");
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
