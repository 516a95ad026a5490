/**
 * A message (or an explicit resume) sent while its session is being cancelled (contracts §9:
 * "queued runs are dropped … a new message re-opens it"). The send and the cancel are ordered
 * on the session's row lock (run-queueing.ts); here the send's run commits first, so the
 * cancel drops it (`202`, the run ends `cancelled`). What is held: the sending API is between
 * that commit and adding its run's job when the cancel commits, so the cancel finds no job to
 * remove; then the send adds the job of a run that has already ended. Held deterministically:
 * the sending API's Redis connection goes through a proxy that holds the first command naming
 * the session (the job's add) until the cancel has answered. The job stayed waiting for a
 * worker to take and drop it (and, with fair dispatch, the tenant's next runs were queued
 * behind it). Now the send sees its run ended once its job is added and removes it.
 */
import { Queue } from "bullmq";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RunningApi, startApi } from "../src/producer/api-server.js";
import { FleetClient } from "../src/producer/client.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { holdingProxy } from "./support/holding-proxy.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };
const EMPTY = { waiting: 0, prioritized: 0, delayed: 0, active: 0 };

describe("a send committed before a cancel whose job is added after it", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let runsQueue: Queue;
  let resumesQueue: Queue;

  beforeAll(async () => {
    fleet = await createFleetEnv("send-cancel-race");
    ({ client } = await fleet.startApi());
    runsQueue = new Queue("runs", { connection: fleet.redis, prefix: fleet.config.prefix });
    resumesQueue = new Queue("resumes", { connection: fleet.redis, prefix: fleet.config.prefix });
  }, 60_000);
  afterAll(async () => {
    await runsQueue?.close();
    await resumesQueue?.close();
    await fleet?.close();
  });

  /**
   * `act` through an API whose Redis connection is held at the first command naming the
   * session; the session is cancelled through the other API once `act`'s run is committed.
   */
  async function cancelledMidway<T>(
    sessionId: string,
    act: (sender: FleetClient) => Promise<T>,
  ): Promise<{ answer: T; cancelled: boolean }> {
    const redisPort = Number(new URL(fleet.config.redisUrl).port || 6379);
    const proxy = await holdingProxy(redisPort, sessionId);
    let sending: RunningApi | undefined;
    try {
      sending = await startApi(
        { ...fleet.config, redisUrl: `redis://127.0.0.1:${proxy.port}`, logLevel: "silent" },
        { port: 0 },
      );
      const acting = act(new FleetClient({ baseUrl: sending.url }));
      await proxy.reached;
      const { sql } = fleet.database;
      await waitFor(
        async () =>
          (await sql`select 1 from runs where session_id = ${sessionId} and status = 'queued'`).length === 1,
        20_000,
        "the run committed",
      );
      const { cancelled } = await client.cancelSession(sessionId);
      proxy.release();
      return { answer: await acting, cancelled };
    } finally {
      await sending?.stop();
      await proxy.close();
    }
  }

  async function runsOf(sessionId: string) {
    return fleet.database.sql<{ id: string; status: string; ended_reason: string | null }[]>`
      select id, status, ended_reason from runs where session_id = ${sessionId} order by queue_seq`;
  }

  it("a message: its run ends cancelled, no job is left, and the next message re-opens the session", async () => {
    const { id } = await client.createSession({ agent: AGENT });
    const { answer, cancelled } = await cancelledMidway(id, (sender) => sender.send(id, "go"));
    expect(cancelled).toBe(true);
    expect(await runsOf(id)).toEqual([{ id: answer.runId, status: "ended", ended_reason: "cancelled" }]);
    expect((await client.getSession(id)).status).toBe("cancelled");
    // The job added after the cancel is removed, not left for a worker to take and drop.
    expect(await runsQueue.getJobCounts("waiting", "prioritized", "delayed", "active")).toEqual(EMPTY);

    // A new message re-opens the cancelled session; its job is the only one waiting.
    const next = await client.send(id, "again");
    expect((await client.getSession(id)).status).not.toBe("cancelled");
    const waiting = await runsQueue.getJobs(["prioritized", "waiting"], 0, -1, true);
    expect(waiting.map((job) => job.data.runId)).toEqual([next.runId]);
  }, 60_000);

  it("an explicit resume: it ends cancelled and leaves no job", async () => {
    const { id } = await client.createSession({ agent: AGENT, messages: [{ role: "user", content: "hi" }] });
    // Interrupted mid-turn, nothing queued: a resume is `call_model`.
    await fleet.database
      .sql`update sessions set run_started = true, tail_state = 'awaiting_model' where id = ${id}`;
    const { answer, cancelled } = await cancelledMidway(id, (sender) => sender.resume(id));
    expect(cancelled).toBe(true);
    expect(await runsOf(id)).toEqual([{ id: answer.runId, status: "ended", ended_reason: "cancelled" }]);
    expect(await resumesQueue.getJobCounts("waiting", "prioritized", "delayed", "active")).toEqual(EMPTY);
  }, 60_000);
});
