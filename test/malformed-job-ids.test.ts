/**
 * A run job whose ids are strings Postgres cannot store (a NUL byte: a job added or edited by
 * hand in Bull Board) is bad input like any malformed payload: it fails once, naming the
 * field, and is never retried (invariant 5). Before, its schema took any non-empty string,
 * and the claim's query failed in Postgres (22021) as an infrastructure fault would: the job
 * was tried again, 5 attempts with backoff, each a logged "job failed" and a sweeper wake-up.
 * A real fleet worker, real Redis and Postgres.
 */
import { randomUUID } from "node:crypto";
import { Queue } from "bullmq";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

describe("a run job whose ids Postgres cannot store", () => {
  let fleet: FleetEnv;
  beforeAll(async () => {
    fleet = await createFleetEnv("badjobids");
    await fleet.spawnWorker();
  }, 60_000);
  afterAll(async () => fleet?.close());

  it.each([
    ["sessionId", { sessionId: "s\u0000", runId: "r" }],
    ["runId", { sessionId: "s", runId: "r\u0000" }],
  ])(
    "fails once, naming job.data.%s, and is never retried",
    async (field, data) => {
      const connection = new Redis(fleet.env.REDIS_URL!, { maxRetriesPerRequest: null });
      const queue = new Queue("runs", { connection, prefix: fleet.env.FLEET_PREFIX });
      try {
        const job = await queue.add("run", data, {
          attempts: 5,
          backoff: { type: "fixed", delay: 100 },
          jobId: `bad-${randomUUID()}`,
        });
        // Failed for good, or tried a second time (the defect): whichever comes first.
        await waitFor(
          async () => {
            const fresh = await queue.getJob(job.id!);
            const state = await fresh?.getState();
            return state === "failed" || state === "completed" || (fresh?.attemptsMade ?? 0) >= 2;
          },
          15_000,
          "the job to finish or be retried",
        );
        const failed = (await queue.getJob(job.id!))!;
        expect(failed.attemptsMade).toBe(1);
        expect(await failed.getState()).toBe("failed");
        expect(failed.failedReason).toContain(`job.data.${field}`);
      } finally {
        await queue.close();
        await connection.quit();
      }
    },
    30_000,
  );
});
