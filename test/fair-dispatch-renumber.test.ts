/**
 * Fair dispatch under a backlog that never drains (fair-dispatch.ts, renumbering): the
 * queue's head climbs with every run taken; before, it reached BullMQ's priority limit and
 * from then every new run got 2,097,151, so a new tenant's run waited behind the whole
 * backlog. Real Redis and BullMQ: several dispatchers on connections of their own (API
 * processes), a real BullMQ worker taking jobs and cancels removing them, all at once.
 */
import { type Job, PRIORITY_LIMIT, Queue, Worker } from "bullmq";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FairDispatch } from "../src/producer/fair-dispatch.js";
import { createRedis } from "../src/shared/redis.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const REDIS_URL = process.env.TEST_REDIS_URL ?? "redis://127.0.0.1:6379";

let fleet: FleetEnv;
beforeAll(async () => {
  fleet = await createFleetEnv("fair-renumber");
});
afterAll(async () => {
  await fleet.close();
});

type Data = { tenant: string; seq: number };

/** Rank (0-based) of a job among the waiting prioritized jobs, in the order workers take them. */
async function rankOf(queue: Queue, jobId: string): Promise<number> {
  const waiting = await queue.getJobs(["prioritized"], 0, -1, true);
  return waiting.findIndex((job) => job.id === jobId);
}

describe("fair dispatch under a backlog that never drains", () => {
  it("a new tenant's run still goes to the head after the clock passed BullMQ's limit", async () => {
    const queue = new Queue("never-drains", { connection: fleet.redis, prefix: fleet.config.prefix });
    try {
      const fair = new FairDispatch({
        redis: fleet.redis,
        queue,
        prefix: fleet.config.prefix,
        enabled: true,
      });
      // A queue that has served ~2.1M runs without ever emptying: its head is near the limit.
      await queue.add("run", { tenant: "old", seq: 0 }, { jobId: "old", priority: PRIORITY_LIMIT - 300 });
      const first = (await fair.assign("big", 300))!;
      await queue.addBulk(
        first.map((priority, seq) => ({
          name: "run",
          data: { tenant: "big", seq },
          opts: { priority, jobId: `big-${seq}` },
        })),
      );
      // Every run taken is replaced by another: 300 wait all along, for 400 more runs.
      for (let seq = 300; seq < 700; seq++) {
        const [head] = await queue.getJobs(["prioritized"], 0, 0, true);
        await head!.remove();
        const [priority] = (await fair.assign("big", 1))!;
        await queue.add("run", { tenant: "big", seq }, { priority, jobId: `big-${seq}` });
      }
      const [priority] = (await fair.assign("small", 1))!;
      await queue.add("run", { tenant: "small", seq: 0 }, { priority, jobId: "small" });
      // Before: small got 2,097,151, like the whole backlog, and was 300th.
      expect(priority).toBeLessThan(PRIORITY_LIMIT);
      expect(await rankOf(queue, "small")).toBeLessThanOrEqual(1);
      // big's runs are still in their order.
      const waiting = await queue.getJobs(["prioritized"], 0, -1, true);
      const seqs = waiting.filter((job) => job.data.tenant === "big").map((job) => job.data.seq as number);
      expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
      expect(seqs).toHaveLength(301); // 700 queued, 399 taken (and "old")
    } finally {
      await queue.obliterate({ force: true });
      await queue.close();
    }
  });

  it("a job added from priorities handed out before a renumbering keeps its tenant's order; a half-done renumbering is finished", async () => {
    const { prefix } = fleet.config;
    const queue = new Queue("late", { connection: fleet.redis, prefix });
    const fair = () =>
      new FairDispatch({ redis: fleet.redis, queue, prefix, enabled: true, renumberAt: 10, chunk: 2 });
    const add = async (tenant: string, seq: number, priority: number) =>
      queue.add("run", { tenant, seq }, { priority, jobId: `${tenant}-${seq}` });
    const takeHead = async (n: number) => {
      for (const job of await queue.getJobs(["prioritized"], 0, n - 1, true)) await job.remove();
    };
    const orderOf = async (tenant: string) =>
      (await queue.getJobs(["prioritized"], 0, -1, true))
        .filter((job) => job.data.tenant === tenant)
        .map((job) => job.data.seq as number);
    try {
      const a = fair();
      for (const [seq, priority] of (await a.assign("a", 30))!.entries()) await add("a", seq, priority);
      await takeHead(8); // the head is at 9
      const late = (await a.assign("a", 1))!; // handed out, its job not added yet
      expect(late).toEqual([31]);
      await takeHead(1); // the head is at 10: the next assignment renumbers (by 9)
      const [c] = (await fair().assign("c", 1))!;
      await add("c", 0, c!);
      expect(c).toBe(1);
      // The late job arrives after the renumbering ended: told so, it moves to 31 - 9.
      await add("a", 30, late[0]!);
      await a.added(late, ["a-30"]);
      const [next] = (await a.assign("a", 1))!;
      await add("a", 31, next!);
      expect((await queue.getJob("a-30"))!.priority).toBe(22);
      expect(next).toBe(23);
      expect(await orderOf("a")).toEqual(Array.from({ length: 23 }, (_, i) => i + 9));

      // An API process dies in the middle of a renumbering (after two steps of 2 jobs).
      await takeHead(9); // c and a-9…a-16: the head is a-17, at 9
      const lateToo = (await a.assign("a", 1))!; // [24], before the renumbering
      await takeHead(1); // the head is at 10 again
      let calls = 0;
      const dying = new FairDispatch({
        redis: {
          hdel: fleet.redis.hdel.bind(fleet.redis),
          eval: (async (...args: unknown[]) => {
            if (++calls > 2) throw new Error("killed");
            return (fleet.redis.eval as (...a: unknown[]) => Promise<unknown>)(...args);
          }) as never,
        },
        queue,
        prefix,
        enabled: true,
        renumberAt: 10,
        chunk: 2,
      });
      await expect(dying.assign("d", 1)).rejects.toThrow("killed");
      // Its job lands ahead of the cursor: the renumbering moves it, `added` leaves it alone.
      await add("a", 32, lateToo[0]!);
      await a.added(lateToo, ["a-32"]);
      expect((await queue.getJob("a-32"))!.priority).toBe(24);
      const [d] = (await fair().assign("d", 1))!; // finishes the renumbering, then assigns
      await add("d", 0, d!);
      expect((await queue.getJob("a-32"))!.priority).toBe(15);
      expect(await orderOf("a")).toEqual(Array.from({ length: 15 }, (_, i) => i + 18));
      const scores = await fleet.redis.zrange(queue.keys.prioritized!, "0", "-1", "WITHSCORES");
      const priorities = scores
        .filter((_, i) => i % 2 === 1)
        .map((score) => Math.floor(Number(score) / 2 ** 32));
      expect(Math.max(...priorities)).toBeLessThanOrEqual(15);
    } finally {
      await queue.obliterate({ force: true });
      await queue.close();
    }
  });

  it("keeps priorities bounded and every tenant's order, with concurrent dispatchers, a worker and cancels", async () => {
    const renumberAt = 50;
    const name = "concurrent";
    const { prefix } = fleet.config;
    const connections = Array.from({ length: 3 }, () => createRedis(REDIS_URL, "worker"));
    const queues = connections.map((connection) => new Queue(name, { connection, prefix }));
    const dispatchers = queues.map(
      (queue, i) =>
        new FairDispatch({ redis: connections[i]!, queue, prefix, enabled: true, renumberAt, chunk: 16 }),
    );
    const taken: Data[] = [];
    const workerConnection = createRedis(REDIS_URL, "worker");
    const worker = new Worker<Data>(
      name,
      async (job: Job<Data>) => {
        taken.push(job.data);
        heads.push(job.priority);
        // The backlog never drains while the dispatchers run (checked: nothing resets the clock).
        if (producing && (await queues[0]!.getPrioritizedCount()) === 0) drained++;
        await new Promise((r) => setTimeout(r, 1));
      },
      { connection: workerConnection, prefix, concurrency: 1, autorun: false },
    );
    const added: Data[] = [];
    const cancelled: Data[] = [];
    const handedOut: number[] = [];
    /** The priority of every job the worker took: the clock. */
    const heads: number[] = [];
    let producing = true;
    let drained = 0;
    try {
      // A backlog first, so the queue never empties while the worker runs.
      const big = (await dispatchers[0]!.assign("big", 300))!;
      await queues[0]!.addBulk(
        big.map((priority, seq) => ({
          name: "run",
          data: { tenant: "big", seq },
          opts: { priority, jobId: `big-${seq}` },
        })),
      );
      added.push(...big.map((_, seq) => ({ tenant: "big", seq })));
      void worker.run();
      // Each dispatcher drives two tenants (one at a time per tenant, so its order is known).
      const produce = async (i: number) => {
        const seqs = new Map<string, number>();
        for (let round = 0; round < 200; round++) {
          const tenant = `t${i}-${round % 2}`;
          const count = 1 + (round % 4);
          const priorities = (await dispatchers[i]!.assign(tenant, count))!;
          handedOut.push(...priorities);
          const jobs = priorities.map((priority) => {
            const seq = seqs.get(tenant) ?? 0;
            seqs.set(tenant, seq + 1);
            return { name: "run", data: { tenant, seq }, opts: { priority, jobId: `${tenant}-${seq}` } };
          });
          await queues[i]!.addBulk(jobs);
          added.push(...jobs.map((job) => job.data));
        }
      };
      const cancel = async () => {
        for (let round = 0; round < 40; round++) {
          const waiting = await queues[2]!.getJobs(["prioritized"], 0, 50, true);
          const victim = waiting[Math.floor(waiting.length / 2)];
          if (
            victim &&
            (await victim.remove().then(
              () => true,
              () => false,
            ))
          )
            cancelled.push(victim.data as Data);
          await new Promise((r) => setTimeout(r, 5));
        }
      };
      await Promise.all([produce(0), produce(1), produce(2), cancel()]);
      producing = false;
      // The clock (the priority of the jobs taken) never passed the threshold: before, it
      // climbed with every run taken (to ~125 here, by the end of this phase).
      expect(Math.max(...heads)).toBeLessThanOrEqual(renumberAt);
      expect(drained).toBe(0);
      // The backlog is still there: a new tenant's run goes to the head.
      await worker.pause();
      const [fresh] = (await dispatchers[1]!.assign("fresh", 1))!;
      await queues[1]!.add("run", { tenant: "fresh", seq: 0 }, { priority: fresh, jobId: "fresh-0" });
      added.push({ tenant: "fresh", seq: 0 });
      const waitingNow = await queues[0]!.getWaitingCount();
      expect(await queues[0]!.getPrioritizedCount()).toBeGreaterThan(50);
      expect(waitingNow).toBe(0);
      expect(await rankOf(queues[0]!, "fresh-0")).toBeLessThanOrEqual(7);
      worker.resume();
      const deadline = Date.now() + 60_000;
      while ((await queues[0]!.getPrioritizedCount()) + (await queues[0]!.getActiveCount()) > 0) {
        if (Date.now() > deadline) throw new Error("the worker did not drain the queue");
        await new Promise((r) => setTimeout(r, 50));
      }
      expect(added.length).toBe(1_801);
      expect(Math.max(...handedOut)).toBeLessThan(PRIORITY_LIMIT);
      // Every job taken once or cancelled, none lost, none twice; each tenant's in order.
      const key = (d: Data) => `${d.tenant}-${d.seq}`;
      const outcomes = [...taken, ...cancelled].map(key).sort();
      expect(outcomes).toEqual(added.map(key).sort());
      const byTenant = new Map<string, number[]>();
      for (const d of taken) byTenant.set(d.tenant, [...(byTenant.get(d.tenant) ?? []), d.seq]);
      for (const [tenant, seqs] of byTenant) expect(seqs, tenant).toEqual([...seqs].sort((a, b) => a - b));
    } finally {
      await worker.close();
      await queues[0]!.obliterate({ force: true });
      await Promise.all(queues.map((queue) => queue.close()));
      for (const connection of [...connections, workerConnection]) connection.disconnect();
    }
  }, 120_000);
});
