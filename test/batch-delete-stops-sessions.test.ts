/**
 * A batch marked deleted (DELETE /v1/batches/:id: the mark commits first, its sessions go
 * chunk by chunk, the rest left to the sweeper when the API stops or spends 20 s) runs
 * nothing more: its queued runs are not started by a worker, and a new message or a page of an imported
 * history to one of its sessions is a 404, as the batch is.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetApiError, FleetClient } from "../src/producer/client.js";
import { DataDeletion } from "../src/shared/store/data-deletion.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const AGENT = {
  model: {
    provider: "scripted" as const,
    steps: [{ toolCalls: [{ id: "nap", name: "sleep", arguments: { ms: 10 } }] }, { text: "done" }],
  },
  tools: ["sleep"],
};

describe("a batch marked deleted whose sessions are not gone yet", () => {
  let fleet: FleetEnv;
  let client: FleetClient;

  beforeAll(async () => {
    fleet = await createFleetEnv("batchdeletestops");
    ({ client } = await fleet.startApi());
  }, 60_000);
  afterAll(async () => {
    await fleet?.close();
  });

  it("DELETE /v1/batches/:id leaves none of its runs' jobs in the queue", async () => {
    const batch = await client.createBatch(Array.from({ length: 3 }, () => ({ agent: AGENT, input: "go" })));
    const { Queue } = await import("bullmq");
    const runs = new Queue("runs", { connection: fleet.redis, prefix: fleet.config.prefix });
    try {
      const ids = new Set(batch.sessions.map((s) => s.id));
      const left = async () =>
        (await runs.getJobs(["waiting", "prioritized", "delayed"])).filter((j) => ids.has(j.data?.sessionId));
      expect(await left()).toHaveLength(3);
      expect(await client.deleteBatch(batch.id)).toMatchObject({ deleted: true, complete: true });
      expect(await left()).toHaveLength(0);
    } finally {
      await runs.close();
    }
  });

  it("starts none of its queued runs and takes no new message", async () => {
    const { sql } = fleet.database;
    const batch = await client.createBatch(Array.from({ length: 3 }, () => ({ agent: AGENT, input: "go" })));
    // The API marked it deleted and stopped before its chunks (the sweeper finishes them).
    expect(await new DataDeletion(fleet.database).markBatchDeleted("default", batch.id)).not.toBeNull();
    const sent = await client.send(batch.sessions[0]!.id, "more").catch((e: FleetApiError) => e.status);
    expect(sent).toBe(404);
    const worker = await fleet.spawnWorker();
    // A session outside the batch completes: the worker has had its turn at the batch's jobs.
    const { id } = await client.createSession({ agent: AGENT });
    await client.send(id, "go");
    for (let i = 0; i < 200 && (await client.getSession(id)).status !== "completed"; i++)
      await new Promise((r) => setTimeout(r, 100));
    await new Promise((r) => setTimeout(r, 1000));
    const started = await sql`select id from runs where batch_id = ${batch.id} and started_at is not null`;
    const tools = await sql`
      select m.seq from messages m join sessions s on s.id = m.session_id
       where s.batch_id = ${batch.id} and m.role = 'tool'`;
    expect({ started: started.length, tools: tools.length }).toEqual({ started: 0, tools: 0 });
    expect(worker.child.exitCode).toBeNull();
  }, 60_000);

  it("takes no page of an imported history into one of its sessions", async () => {
    const { sql } = fleet.database;
    // A session of a batch given a history and no input: it has no run, so it takes pages.
    const batch = await client.createBatch([{ agent: AGENT, messages: [{ role: "user", content: "hi" }] }]);
    const id = batch.sessions[0]!.id;
    expect(await client.importMessages(id, [{ role: "user", content: "page" }], { afterSeq: 1 })).toEqual({
      lastSeq: 2,
    });
    expect(await new DataDeletion(fleet.database).markBatchDeleted("default", batch.id)).not.toBeNull();
    const page = await client
      .importMessages(id, [{ role: "user", content: "after the delete" }], { afterSeq: 2 })
      .then(
        () => 200,
        (e: FleetApiError) => e.status,
      );
    const [stored] = await sql`select last_seq from sessions where id = ${id}`;
    expect({ page, lastSeq: stored?.last_seq }).toEqual({ page: 404, lastSeq: 2 });
  });
});
