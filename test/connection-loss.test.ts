/**
 * A killed Postgres connection never crashes a process (issue: `pg_terminate_backend` on a
 * fresh connection crashed `fleet worker` with an unhandled rejection), and resumes go ahead
 * of queued new work (a job without a priority is taken first).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
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
        // The in-process API's connections were terminated too: a read may fail once.
        const session = await client.getSession(id).catch(() => null);
        return !!session && session.runs.length > 0 && session.runs.every((r) => r.status === "ended");
      },
      30_000,
      "every run to end after the terminations",
    );
    expect(worker.child.exitCode).toBeNull();
  }, 60_000);
});

describe("resumes ahead of new work", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  beforeAll(async () => {
    fleet = await createFleetEnv("priority");
    ({ client } = await fleet.startApi());
  });
  afterAll(async () => {
    await fleet?.close();
  });

  it("a resume starts at once while every slot for new work is busy and first runs wait", async () => {
    await fleet.spawnWorker({ WORKER_CONCURRENCY: "1", WORKER_RESUME_CONCURRENCY: "1" });
    const sleeper = {
      model: {
        provider: "scripted" as const,
        // Far longer than the test: the only slot for new work stays busy whatever the load.
        steps: [{ toolCalls: [{ name: "sleep", arguments: { ms: 60_000 } }] }, { text: "slept" }],
      },
      tools: ["sleep"],
    };
    // The only slot for new work sleeps; 20 more first runs wait behind it.
    const busy = await client.createBatch(
      Array.from({ length: 21 }, () => ({ agent: sleeper, input: "sleep" })),
    );
    await waitFor(
      async () => (await client.getSession(busy.sessions[0]!.id)).messages.length >= 2,
      10_000,
      "the first run inside its sleep",
    );
    // A session left interrupted: resumed while all of that waits.
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "resumed" }] } },
      messages: [{ role: "user", content: "are you there?" }],
    });
    const { runId } = await client.resume(id);
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.endedReason).toBe("completed");
    // Completed while the sleeping run still holds the only slot for new work and the other
    // twenty wait: it took a slot of its own, not a place behind them.
    const first = await client.getSession(busy.sessions[0]!.id);
    expect(first.runs[0]!.status).toBe("running");
    const queued = await Promise.all(busy.sessions.slice(1).map(({ id }) => client.getSession(id)));
    expect(queued.every((s) => s.runs[0]!.status === "queued")).toBe(true);
  }, 30_000);
});
