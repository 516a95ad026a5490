/**
 * A run whose job Redis did not take (the API answers 202 all the same, and counts on the
 * sweeper) behind a backlog longer than one orphan scan reads (500 queued runs): the scan
 * read the 500 oldest queued runs every time, all waiting with their jobs, and never reached
 * the lost one until the backlog ahead of it had drained. The scans now go through the
 * backlog a page at a time, so the lost job is added again within a few scans.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { QUEUES, RunQueues } from "../src/shared/queues.js";
import type { Sweeper } from "../src/sweeper/sweeper.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { sweeperOf } from "./support/stalled-run.js";

const agent = { model: { provider: "scripted" as const, steps: [{ text: "done" }] } };

describe("a lost job behind a long backlog", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let queues: RunQueues;
  let sweeper: Sweeper;

  beforeAll(async () => {
    fleet = await createFleetEnv("orphanbacklog");
    ({ client } = await fleet.startApi());
    queues = new RunQueues(fleet.redis, fleet.config.prefix);
    sweeper = sweeperOf(fleet, queues);
  });
  afterAll(async () => {
    await queues?.close();
    await fleet?.close();
  });

  it("is added again within a few scans, and the waiting backlog is left alone", async () => {
    // 1,200 queued runs whose jobs wait (no worker runs), in batches of one transaction each.
    for (let i = 0; i < 4; i++)
      await client.createBatch(
        Array.from({ length: 300 }, (_, j) => ({ agent, input: `backlog ${i}.${j}` })),
      );
    const { id } = await client.createSession({ agent });
    const { runId } = await client.send(id, "hello");
    const jobId = QUEUES.runs.jobId({ sessionId: id, runId });
    // Its job never reached Redis (or Redis lost it): the run is queued in Postgres alone.
    await (await queues.getJob("run", jobId))?.remove();

    let requeued = 0;
    for (let scan = 0; scan < 4 && !(await queues.getJob("run", jobId)); scan++)
      requeued += await sweeper.sweepOrphanedRuns(0);
    expect(await queues.getJob("run", jobId)).toBeDefined();
    expect(requeued).toBe(1);
    const [row] = await fleet.database.sql<{ n: number }[]>`
      select count(*)::int as n from sessions where resume_attempts > 0`;
    expect(row!.n).toBe(0);
  }, 60_000);
});
