/**
 * A batch's results read while the batch is deleted (DELETE /v1/batches/:id marks it, then
 * purges its sessions chunk by chunk) does not end as a whole answer: the read is read a page
 * at a time, and the pages after the purge are empty, which read as the end of the results.
 * The client then held part of the batch for all of it. It ends as a 404 instead: over HTTP
 * the answer is broken off, and the client's read, going on after its last line, is a 404.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { Deletions } from "../src/producer/deletions.js";
import { FleetService } from "../src/producer/fleet-service.js";
import type { FleetServiceDeps } from "../src/producer/fleet-service-deps.js";
import { DeletionCleanup } from "../src/shared/deletion-cleanup.js";
import { NotFoundError } from "../src/shared/errors.js";
import { BatchStore } from "../src/shared/store/batches.js";
import { DataDeletion } from "../src/shared/store/data-deletion.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

describe("a batch's results read while the batch is deleted", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let service: FleetService;

  beforeAll(async () => {
    fleet = await createFleetEnv("resultsduringdelete");
    ({ client } = await fleet.startApi());
    service = new FleetService({
      queries: new SessionQueries(fleet.database),
      batches: new BatchStore(fleet.database),
      queues: { getJob: async () => undefined },
      metrics: { runs: { inc: () => {} }, resumeRefusals: { inc: () => {} } },
      toolNames: { known: async () => new Set<string>() },
      models: { endpoints: new Map(), allowedBaseUrls: [] },
    } as unknown as FleetServiceDeps);
  }, 60_000);
  afterAll(() => fleet?.close());

  /** Reads the results two sessions a page; `between` runs after the first page. */
  async function readAcross(between: (batchId: string) => Promise<unknown>) {
    const batch = await client.createBatch(Array.from({ length: 6 }, () => ({ agent: AGENT })));
    const read: string[] = [];
    const results = await service.batchResults("default", batch.id, 2);
    const ended = await (async () => {
      for await (const result of results) {
        read.push(result.sessionId);
        if (read.length === 2) await between(batch.id);
      }
      return "ended";
    })().catch((error: unknown) => error);
    return { read: read.length, ended: ended instanceof NotFoundError ? 404 : ended };
  }

  it("deleted whole: the read is a 404, not an end after the pages read before", async () => {
    const deletions = new Deletions({
      store: new DataDeletion(fleet.database),
      cleanup: new DeletionCleanup({
        redis: fleet.redis,
        prefix: fleet.config.prefix,
        removeJob: async () => {},
        metrics: { sessionsDeleted: { inc: () => {} } },
        eventsEnabled: false,
      }),
    });
    const answer = await readAcross(async (id) =>
      expect(await deletions.deleteBatch("default", id)).toMatchObject({ complete: true }),
    );
    expect(answer).toEqual({ read: 2, ended: 404 });
  });

  it("marked deleted, its sessions not purged yet: a 404 too", async () => {
    const answer = await readAcross((id) => new DataDeletion(fleet.database).markBatchDeleted("default", id));
    expect(answer).toEqual({ read: 2, ended: 404 });
  });

  it("a batch not deleted is read whole", async () => {
    expect(await readAcross(async () => {})).toEqual({ read: 6, ended: "ended" });
  });
});
