/**
 * A rolling deploy: a newer API queues a run's job with a field this release's worker does
 * not know (a job's data names the session and the run; everything else is read from
 * Postgres). The worker's strict parse failed the job for good (UnrecoverableError), and the
 * run waited, queued, until a sweeper found its job failed and queued it again, a retry counted
 * against the session. Now a worker reads the two ids it needs and ignores the rest; a job
 * whose ids are missing or not text still fails at once. A real worker process, no sweeper.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { QUEUES, RunQueues } from "../src/shared/queues.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

let fleet: FleetEnv;
let client: FleetClient;
let queues: RunQueues;

beforeAll(async () => {
  fleet = await createFleetEnv("newer-job");
  ({ client } = await fleet.startApi());
  queues = new RunQueues(fleet.redis, fleet.config.prefix);
}, 60_000);
afterAll(async () => {
  await queues?.close();
  await fleet?.close();
});

describe("a run's job queued by a newer release with a field this worker does not know", () => {
  it("is run, not failed", async () => {
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "done" }] } },
    });
    const { runId } = await client.send(id, "hi");
    // The job a newer API queued instead: the same id, one more field.
    const jobId = QUEUES.runs.jobId({ sessionId: id, runId });
    await queues.runs.remove(jobId);
    await queues.runs.add("run", { sessionId: id, runId, traceparent: "00-abc-def-01" }, { jobId });
    const worker = await fleet.spawnWorker();
    expect(await client.waitForRun(runId, { timeoutMs: 20_000 })).toMatchObject({ endedReason: "completed" });
    expect(worker.output()).not.toMatch(/job failed/);
  }, 60_000);
});
