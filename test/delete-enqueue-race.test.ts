/**
 * A run committed just before a delete whose job was added just after it (the delete found no
 * job to remove): the producer looks again once its job is added, as it does for a cancel
 * (cancel-cleanup.ts), and removes the job — also when the delete took the run with it (a
 * session deleted) or the batch is deleted rather than cancelled. Left, each such job waited in
 * the queue for a worker to take and drop it, the tenant's next runs queued behind it.
 * Modelled here by deleting in the store alone (no job removed) after the jobs were added.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { dropJobIfCancelled, dropJobsOfCancelled } from "../src/producer/cancel-cleanup.js";
import type { FleetClient } from "../src/producer/client.js";
import type { FleetServiceDeps } from "../src/producer/fleet-service-deps.js";
import { QUEUES, RunQueues } from "../src/shared/queues.js";
import { DataDeletion } from "../src/shared/store/data-deletion.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

describe("a job added after the delete of its run", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let queues: RunQueues;
  let deps: Pick<FleetServiceDeps, "queues" | "queries" | "priorities" | "resumePriorities">;

  beforeAll(async () => {
    fleet = await createFleetEnv("deleteenqueuerace");
    ({ client } = await fleet.startApi());
    queues = new RunQueues(fleet.redis, fleet.config.prefix);
    deps = { queues, queries: new SessionQueries(fleet.database) } as typeof deps;
  }, 60_000);
  afterAll(async () => {
    await queues?.runs.close();
    await queues?.resumes.close();
    await fleet?.close();
  });

  /** Whether the run's job is in the queue. */
  const jobOf = async (sessionId: string, runId: string) =>
    (await queues.getJob("run", QUEUES.runs.jobId({ sessionId, runId }))) !== undefined;

  it("of a deleted session is removed", async () => {
    const { id } = await client.createSession({ agent: AGENT });
    const { runId } = await client.send(id, "go");
    expect(await jobOf(id, runId)).toBe(true);
    expect(await new DataDeletion(fleet.database).deleteSession("default", id)).not.toBeNull();
    await dropJobIfCancelled(deps, "default", { sessionId: id, runId, kind: "run" });
    expect(await jobOf(id, runId)).toBe(false);
  });

  it("of a batch deleted (marked, or purged too) is removed", async () => {
    for (const purge of [false, true]) {
      const batch = await client.createBatch([{ agent: AGENT, input: "go" }]);
      const { id, runId } = batch.sessions[0]! as { id: string; runId: string };
      expect(await jobOf(id, runId)).toBe(true);
      const store = new DataDeletion(fleet.database);
      expect(await store.markBatchDeleted("default", batch.id)).not.toBeNull();
      if (purge) expect(await store.purgeBatchChunk(batch.id, 10)).toMatchObject({ done: true });
      await dropJobsOfCancelled(deps, "default", batch.id, [{ sessionId: id, runId }]);
      expect({ purge, job: await jobOf(id, runId) }).toEqual({ purge, job: false });
    }
  });
});
