/**
 * A batch cancelled while its runs are being dispatched fairly (contracts §9, §10): the
 * creation has committed its sessions and queued runs, and is between that commit and adding
 * their jobs with the tenant's fair priorities (fair-dispatch.ts) when the cancel commits. The
 * cancel finds no job to remove and, the tenant having nothing queued, resets its fair order;
 * then the creation adds the jobs of runs that have already ended. Held deterministically: the
 * creating API's Redis connection goes through a proxy that holds the fair-dispatch script
 * until the cancel has answered. No session of the cancelled batch starts a run or gets a
 * message (a worker finds no queued run), nothing stays counted active for the tenant; but the
 * jobs stayed waiting, each to be taken and dropped by a worker, and the tenant's next session
 * was queued behind them (its fair order started after them). Now the creation sees the batch
 * cancelled once its jobs are added and removes them, and its tenant's order starts over.
 */
import { Queue } from "bullmq";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startApi } from "../src/producer/api-server.js";
import { FleetClient } from "../src/producer/client.js";
import { countActiveSessions } from "../src/shared/store/active-sessions.js";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { holdingProxy } from "./support/holding-proxy.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

describe("cancelling a batch while its runs are being dispatched", () => {
  let fleet: FleetEnv;

  beforeAll(async () => {
    fleet = await createFleetEnv("cancel-dispatch-race");
  }, 60_000);
  afterAll(() => fleet?.close());

  it("starts no run of the cancelled batch, leaves no job waiting nor a session active, and the tenant's next session runs", async () => {
    const redisPort = Number(new URL(fleet.config.redisUrl).port || 6379);
    const proxy = await holdingProxy(redisPort, `${fleet.config.prefix}:fair:`);
    const apiKey = (await new ApiKeys(fleet.database).create("t")).key;
    const creating = await startApi(
      { ...fleet.config, redisUrl: `redis://127.0.0.1:${proxy.port}`, logLevel: "silent" },
      { port: 0 },
    );
    const cancelling = (await fleet.startApi()).api;
    const creator = new FleetClient({ baseUrl: creating.url, apiKey });
    const canceller = new FleetClient({ baseUrl: cancelling.url, apiKey });
    const queue = new Queue("runs", { connection: fleet.redis, prefix: fleet.config.prefix });
    try {
      const created = creator.createBatch(
        Array.from({ length: 20 }, (_, i) => ({ customId: `r-${i}`, agent: AGENT, input: `go ${i}` })),
      );
      // The creation has committed and is about to take its fair priorities.
      await proxy.reached;
      const { sql } = fleet.database;
      const [batch] = await sql<{ id: string }[]>`select id from batches`;
      await waitFor(
        async () => (await sql`select 1 from runs where status = 'queued'`).length === 20,
        20_000,
        "20 queued runs",
      );
      const cancelled = await canceller.cancelBatch(batch!.id);
      expect(cancelled.counts).toMatchObject({ total: 20, cancelled: 20, queued: 0 });
      proxy.release();
      expect((await created).sessions).toHaveLength(20);
      // The creation added its jobs after the cancel had ended their runs: they are removed,
      // not left waiting for workers to take and drop (100,000 of them for a big part).
      const left = await queue.getJobCounts("waiting", "prioritized", "delayed", "active");
      expect(left).toEqual({ waiting: 0, prioritized: 0, delayed: 0, active: 0 });
      // The tenant's next session is not put behind the jobs of its cancelled batch.
      const next = await canceller.createBatch([{ agent: AGENT, input: "after" }]);
      const waiting = await queue.getJobs(["prioritized", "waiting"], 0, -1, true);
      expect(waiting.map((job) => job.data.runId)).toEqual([next.sessions[0]!.runId]);

      await fleet.spawnWorker();
      await waitFor(
        async () => (await sql`select 1 from runs where status <> 'ended'`).length === 0,
        30_000,
        "the next session's run ended",
      );
      const runs = await sql<{ status: string; ended_reason: string; started_at: Date | null }[]>`
        select status, ended_reason, started_at from runs`;
      expect(runs.filter((r) => r.ended_reason === "cancelled")).toHaveLength(20);
      expect(runs).toHaveLength(21);
      for (const run of runs.filter((r) => r.ended_reason === "cancelled"))
        expect(run).toMatchObject({ status: "ended", ended_reason: "cancelled", started_at: null });
      const cancelledIds = (await created).sessions.map((session) => session.id);
      expect((await sql`select 1 from messages where session_id in ${sql(cancelledIds)}`).length).toBe(0);
      expect(await countActiveSessions(sql, "t")).toBe(0);
      expect((await canceller.getBatch(batch!.id)).counts).toMatchObject({ cancelled: 20, running: 0 });

      // The tenant's next session runs (nothing holds a slot or its place).
      const run = await canceller.waitForRun(next.sessions[0]!.runId!, { timeoutMs: 30_000 });
      expect(run.status).toBe("ended");
    } finally {
      await queue.close();
      await creating.stop();
      await proxy.close();
    }
  }, 90_000);
});
