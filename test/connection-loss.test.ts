/**
 * A killed Postgres connection never crashes a process (issue: `pg_terminate_backend` on a
 * fresh connection crashed `fleet worker` with an unhandled rejection), and resumes go ahead
 * of queued new work (a job without a priority is taken first).
 */
import { Worker } from "bullmq";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { createRunsQueue, enqueueRun, enqueueRuns } from "../src/shared/queues.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

describe("Postgres connections killed under a running worker", () => {
  let fleet: FleetEnv;
  let client: FleetClient;

  beforeAll(async () => {
    fleet = await createFleetEnv("connloss");
    ({ client } = await fleet.startApi());
  });
  afterAll(async () => {
    await fleet?.close();
  });

  it("the worker survives its connections being terminated as fast as they open, then completes its work", async () => {
    const worker = await fleet.spawnWorker({ WORKER_DB_POOL: "2" });
    const dbName = new URL(fleet.env.DATABASE_URL!).pathname.slice(1);
    const { id } = await client.createSession({
      agent: {
        model: {
          provider: "scripted",
          steps: [{ toolCalls: [{ name: "sleep", arguments: { ms: 50 } }] }, { text: "survived" }],
        },
        tools: ["sleep"],
      },
    });
    // Kill every other connection to the fleet's database every 20 ms for 3 s: fresh
    // connections die while they are being set up, as in the reproduction.
    let terminated = 0;
    const until = Date.now() + 3_000;
    const admin = fleet.database.sql;
    const mine = (await admin<{ pid: number }[]>`select pg_backend_pid() as pid`)[0]!.pid;
    while (Date.now() < until) {
      const rows = await admin<{ ok: boolean }[]>`
        select pg_terminate_backend(pid) as ok from pg_stat_activity
         where datname = ${dbName} and pid <> pg_backend_pid() and pid <> ${mine}`.catch(() => []);
      terminated += rows.length;
      if (terminated > 0 && terminated < 40) await client.send(id, "again").catch(() => {});
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(terminated).toBeGreaterThan(5);
    expect(worker.child.exitCode).toBeNull();
    expect(worker.output()).not.toMatch(/unhandled rejection|uncaught exception/);
    // It still works: the session's runs all end.
    await waitFor(
      async () => {
        const session = await client.getSession(id);
        return session.runs.length > 0 && session.runs.every((r) => r.status === "ended");
      },
      30_000,
      "every run to end after the terminations",
    );
    expect(worker.child.exitCode).toBeNull();
  }, 60_000);
});

describe("resumes ahead of new work", () => {
  let fleet: FleetEnv;
  beforeAll(async () => {
    fleet = await createFleetEnv("priority");
  });
  afterAll(async () => {
    await fleet?.close();
  });

  it("a resume added after 50 queued first runs is the first job a worker takes", async () => {
    const queue = createRunsQueue(fleet.redis, fleet.config.prefix);
    await queue.pause();
    await enqueueRuns(
      queue,
      Array.from({ length: 50 }, (_, i) => ({
        name: "run" as const,
        payload: { sessionId: `s${i}`, runId: `r${i}` },
      })),
    );
    await enqueueRun(queue, "resume", { sessionId: "crashed", runId: "resume-1" });
    const order: string[] = [];
    const worker = new Worker(
      queue.name,
      async (job) => {
        order.push(job.name);
      },
      {
        connection: fleet.redis.duplicate({ maxRetriesPerRequest: null }),
        prefix: fleet.config.prefix,
        concurrency: 1,
      },
    );
    await queue.resume();
    await waitFor(() => order.length >= 5, 10_000, "the worker to take jobs");
    await worker.close();
    await queue.close();
    expect(order[0]).toBe("resume");
    expect(order.slice(1).every((name) => name === "run")).toBe(true);
  });
});
