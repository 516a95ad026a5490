/**
 * DELETE /v1/batches/:id tells the workers running its sessions at its mark, as a cancel of the
 * batch does: a tool in progress is aborted then, not when its session's chunk is purged — which
 * may be much later (a batch of 100,000 spends the API's 20 s and leaves the rest to the
 * sweeper; the API may stop after the mark; a chunk skips rows a worker holds).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { Deletions } from "../src/producer/deletions.js";
import { DeletionCleanup } from "../src/shared/deletion-cleanup.js";
import { DataDeletion } from "../src/shared/store/data-deletion.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

/** A sleep far longer than the test waits for the run's end. */
const AGENT = {
  model: {
    provider: "scripted" as const,
    steps: [{ toolCalls: [{ id: "nap", name: "sleep", arguments: { ms: 120_000 } }] }, { text: "done" }],
  },
  tools: ["sleep"],
};

describe("a batch deleted while a session of it runs a tool", () => {
  let fleet: FleetEnv;
  let client: FleetClient;

  beforeAll(async () => {
    fleet = await createFleetEnv("batchdeleteaborts");
    ({ client } = await fleet.startApi());
    await fleet.spawnWorker();
  }, 90_000);
  afterAll(() => fleet?.close());

  it("has the tool aborted at the mark, though its session is not purged yet", async () => {
    const { sql } = fleet.database;
    const batch = await client.createBatch([{ agent: AGENT, input: "go" }]);
    const id = batch.sessions[0]!.id;
    await waitFor(
      async () =>
        (await sql`select 1 from messages where session_id = ${id} and role = 'assistant'`).length === 1,
      30_000,
      "the sleep call committed",
    );
    // The delete's mark commits; its purge fails at once (Postgres lost mid-way: the sweeper
    // would finish it), so the session is still there and only the mark can have told the worker.
    const deletions = new Deletions({
      store: {
        markBatchDeleted: (tenant: string, batchId: string) =>
          new DataDeletion(fleet.database).markBatchDeleted(tenant, batchId),
        deleteSession: async () => null,
        purgeBatchChunk: async () => {
          throw new Error("Connection terminated unexpectedly");
        },
      },
      cleanup: new DeletionCleanup({
        redis: fleet.redis,
        prefix: fleet.config.prefix,
        removeJob: async () => {},
        metrics: { sessionsDeleted: { inc: () => {} } },
        eventsEnabled: true,
      }),
    });
    expect(await deletions.deleteBatch("default", batch.id)).toMatchObject({ complete: false });
    // The worker aborts the sleep and ends the run (its write reads the cancel the mark made).
    await waitFor(
      async () => (await sql`select 1 from runs where session_id = ${id} and status = 'ended'`).length === 1,
      30_000,
      "the run ended (the 120 s sleep aborted)",
    );
    const [tool] = await sql<{ content: string }[]>`
      select content from messages where session_id = ${id} and role = 'tool'`;
    expect(tool?.content ?? "").toMatch(/cancel/i);
  }, 120_000);
});
