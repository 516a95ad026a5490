/**
 * A BullMQ lock lost under a worker (Redis restored from a snapshot, a lock expired meanwhile)
 * is expected: its `error` event is logged as one line, with the job and BullMQ's message,
 * not as a warning with a stack trace (src/worker/worker-errors.ts). The lock mismatch here is
 * BullMQ's own, made on purpose: the job's lock is overwritten while it runs.
 */
import { randomUUID } from "node:crypto";
import { Writable } from "node:stream";
import { Queue, Worker } from "bullmq";
import { Redis } from "ioredis";
import pino from "pino";
import { afterAll, describe, expect, it } from "vitest";
import { lockLost, logWorkerError } from "../src/worker/worker-errors.js";

const REDIS_URL = process.env.TEST_REDIS_URL ?? "redis://127.0.0.1:6379";

describe("worker errors", () => {
  const prefix = `t-workererrors-${randomUUID().slice(0, 8)}`;
  const connection = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  afterAll(async () => {
    const keys = await connection.keys(`${prefix}:*`);
    if (keys.length > 0) await connection.del(...keys);
    connection.disconnect();
  });

  it("a lost lock is one line with the job and BullMQ's message; any other error keeps its stack", async () => {
    const queue = new Queue("q", { connection, prefix });
    const errors: Error[] = [];
    const worker = new Worker(
      "q",
      async (job) => {
        // Another holder's lock, as a restored snapshot or a stalled-job check leaves it.
        await connection.set(`${prefix}:q:${job.id}:lock`, "someone-else");
        return "done";
      },
      { connection: new Redis(REDIS_URL, { maxRetriesPerRequest: null }), prefix },
    );
    worker.on("error", (error) => errors.push(error));
    await queue.add("j", {}, { jobId: "job-1" });
    const deadline = Date.now() + 10_000;
    while (errors.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    await worker.close();
    await queue.close();
    (worker.opts.connection as Redis).disconnect();
    expect(errors[0]?.message).toMatch(/^Lock mismatch for job job-1\./);

    const lines: string[] = [];
    const out = new Writable({
      write(chunk, _encoding, done) {
        lines.push(...String(chunk).split("\n").filter(Boolean));
        done();
      },
    });
    const log = pino({ level: "warn" }, out);
    logWorkerError(log, errors[0]);
    logWorkerError(log, new Error("something else"));
    await new Promise((r) => setImmediate(r));
    expect(lines).toHaveLength(2);
    const [lost, other] = lines.map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(lost).toMatchObject({ jobId: "job-1", err: errors[0]!.message });
    expect(JSON.stringify(lost)).not.toContain("stack");
    expect(JSON.stringify(lost)).not.toContain("\\n    at ");
    expect(other).toMatchObject({ msg: "worker error", err: { message: "something else" } });
    expect((other!.err as { stack?: string }).stack).toContain("at ");
    // BullMQ's other words for it.
    expect(lockLost(new Error("Missing lock for job 7. moveToFinished"))).toEqual({
      jobId: "7",
      err: "Missing lock for job 7. moveToFinished",
    });
    expect(lockLost(new Error("could not renew lock for job 9"))?.jobId).toBe("9");
    expect(lockLost(new Error("Connection is closed."))).toBeNull();
  }, 20_000);

  it("a job whose key is gone (Redis restarted empty under it) is one line too", async () => {
    const queue = new Queue("k", { connection, prefix });
    const errors: Error[] = [];
    const worker = new Worker(
      "k",
      async (job) => {
        // What an empty Redis leaves of a running job: nothing.
        await connection.del(`${prefix}:k:${job.id}`, `${prefix}:k:${job.id}:lock`);
        return "done";
      },
      { connection: new Redis(REDIS_URL, { maxRetriesPerRequest: null }), prefix },
    );
    worker.on("error", (error) => errors.push(error));
    await queue.add("j", {}, { jobId: "job-2" });
    const deadline = Date.now() + 10_000;
    while (errors.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    await worker.close();
    await queue.close();
    (worker.opts.connection as Redis).disconnect();
    expect(errors[0]?.message).toMatch(/^Missing key for job job-2\./);
    expect(lockLost(errors[0])).toEqual({ jobId: "job-2", err: errors[0]!.message });
  }, 20_000);
});
