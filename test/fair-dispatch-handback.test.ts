/**
 * Fair dispatch and runs a worker puts back itself (worker.ts: `busy`, a hand-back for
 * endpoint capacity): BullMQ re-adds such a job with the priority in its hash. A renumbering
 * (fair-dispatch.ts) moves only the jobs waiting in the prioritized set, so a job that was
 * active or delayed meanwhile came back with its priority of the old numbering, behind the
 * whole renumbered backlog (it had reached the head once already). Real worker, Redis,
 * BullMQ and renumbering.
 */
import { Queue, Worker } from "bullmq";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { FairDispatch } from "../src/producer/fair-dispatch.js";
import { putBack } from "../src/worker/put-back.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

let fleet: FleetEnv;
let client: FleetClient;
beforeAll(async () => {
  fleet = await createFleetEnv("fair-handback");
  ({ client } = await fleet.startApi());
});
afterAll(async () => {
  await fleet?.close();
});

describe("a run put back by its worker across a renumbering", () => {
  it("comes back at the head of the renumbered queue, not behind it", async () => {
    const { prefix } = fleet.config;
    const queue = new Queue("runs", { connection: fleet.redis, prefix });
    try {
      const { id } = await client.createSession({
        agent: { model: { provider: "scripted", steps: [{ text: "done" }] } },
      });
      const { runId } = await client.send(id, "go");
      const job = (await queue.getJob(`run-${runId}`))!;
      // It was handed out 500 in a queue whose head had climbed that far.
      await job.changePriority({ priority: 500 });
      // Another worker holds the session: the worker takes the job and puts it back (busy).
      await fleet.redis.set(`${prefix}:lease:${id}`, "elsewhere:token", "PX", 120_000);
      const worker = await fleet.spawnWorker();
      await waitFor(async () => (await queue.getJobState(job.id!)) === "delayed", 20_000, "the job put back");
      worker.child.kill("SIGKILL");
      await worker.exited;
      // Meanwhile the backlog behind it (501…520) is renumbered to 1…20.
      for (let i = 1; i <= 20; i++)
        await queue.add("run", { filler: i }, { jobId: `filler-${i}`, priority: 500 + i });
      const fair = new FairDispatch({ redis: fleet.redis, queue, prefix, enabled: true, renumberAt: 10 });
      expect(await fair.assign("other", 1)).toEqual([1]); // the head, renumbered
      expect((await queue.getJob("filler-1"))!.priority).toBe(1);
      // Its delay ends: it goes back among the waiting runs.
      await (await queue.getJob(job.id!))!.promote();
      const waiting = await queue.getJobs(["prioritized"], 0, -1, true);
      const rank = waiting.findIndex((j) => j.id === job.id);
      // Before: priority 500, 21st of 21, behind every renumbered run.
      expect(rank).toBeLessThanOrEqual(1);
      expect(waiting).toHaveLength(21);
    } finally {
      await queue.obliterate({ force: true });
      await queue.close();
    }
  }, 60_000);

  it("a run taken while its backlog waits, put back after the backlog was renumbered, goes back to the head", async () => {
    const { prefix } = fleet.config;
    const queue = new Queue("taken", { connection: fleet.redis, prefix });
    const worker = new Worker("taken", null, { connection: fleet.redis.duplicate(), prefix, autorun: false });
    try {
      const fair = new FairDispatch({ redis: fleet.redis, queue, prefix, enabled: true, renumberAt: 10 });
      for (const [i, priority] of (await fair.assign("a", 21))!.entries())
        await queue.add("run", { i }, { jobId: `a-${i}`, priority });
      for (let i = 0; i < 10; i++) await (await queue.getJob(`a-${i}`))!.remove(); // the head is 11
      const token = "test-token";
      const taken = (await worker.getNextJob(token))!;
      expect(taken.id).toBe("a-10");
      // While it runs, a new tenant's run renumbers the backlog: a-11…a-20 become 1…10.
      expect(await fair.assign("b", 1)).toEqual([1]);
      expect((await queue.getJob("a-11"))!.priority).toBe(1);
      // Its run waits for capacity: put back, and its delay ends.
      await putBack(fleet.redis, prefix, taken, Date.now() + 60_000, token);
      await (await queue.getJob("a-10"))!.promote();
      const waiting = await queue.getJobs(["prioritized"], 0, -1, true);
      // Before: priority 11, behind a-11…a-20 (now 1…10), last of 11.
      expect(waiting.map((j) => j.id).indexOf("a-10")).toBeLessThanOrEqual(1);
      expect(waiting.map((j) => j.id).filter((id) => id !== "a-10")).toEqual(
        Array.from({ length: 10 }, (_, i) => `a-${i + 11}`),
      );
    } finally {
      await worker.close();
      await queue.obliterate({ force: true });
      await queue.close();
    }
  }, 60_000);
});
