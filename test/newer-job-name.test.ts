/**
 * A rolling deploy: a newer API or sweeper queues a kind of job (a name) this release's worker
 * does not know. The worker failed it for good at once (UnrecoverableError, `unknown job`),
 * and the run it named waited queued until a sweeper found the job failed and queued it again,
 * a retry counted against the session. Now the worker hands the job back delayed, for a newer
 * worker to take, says so once per job name, and only once no worker took it for
 * FLEET_NEWER_AGENT_WAIT_MS ends the run `invalid_agent` and parks the session naming the job;
 * a job that names no run is failed then, with that reason. A real worker process, no sweeper.
 */
import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { QUEUES, RunQueues } from "../src/shared/queues.js";
import { createFleetEnv, type FleetEnv, type WorkerProcess, waitFor } from "./support/fleet-env.js";

let fleet: FleetEnv;
let client: FleetClient;
let queues: RunQueues;
let worker: WorkerProcess;
/** The bound in the worker's environment: 6 s, so its hand-backs come back after 1 s each. */
const WAIT_MS = 6_000;

beforeAll(async () => {
  fleet = await createFleetEnv("newer-job-name");
  ({ client } = await fleet.startApi());
  queues = new RunQueues(fleet.redis, fleet.config.prefix);
  worker = await fleet.spawnWorker({ FLEET_NEWER_AGENT_WAIT_MS: String(WAIT_MS) });
}, 90_000);
afterAll(async () => {
  await queues?.close();
  await fleet?.close();
});

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "done" }] } };

/** The worker's hand-back warnings naming the job `name`. */
function warnings(name: string): string[] {
  return worker
    .output()
    .split("\n")
    .filter(
      (line) =>
        line.includes(`job \\"${name}\\" is of a kind this worker does not know`) &&
        line.includes("handed back for a newer worker"),
    );
}

/** Waits until the job has been taken once, and answers its state then. */
async function stateOnceTaken(jobId: string): Promise<string> {
  let state = "";
  await waitFor(
    async () => {
      state = (await (await queues.runs.getJob(jobId))?.getState()) ?? "missing";
      return !["waiting", "prioritized", "active"].includes(state);
    },
    30_000,
    "the worker to take the job",
  );
  return state;
}

describe("a job of a kind a newer release added, taken by a worker of this release", () => {
  it("is handed back, not failed, and only after the bound ends its run and parks the session naming it", async () => {
    const { id } = await client.createSession({ agent: AGENT });
    // The run and its job as a newer API would queue them, under a job name this worker lacks.
    const runId = randomUUID();
    const jobId = QUEUES.runs.jobId({ sessionId: id, runId });
    await fleet.database.sql`
      insert into runs (id, session_id, tenant, kind, trigger, input, job_id)
      values (${runId}, ${id}, (select tenant from sessions where id = ${id}), 'run', 'api', 'hi', ${jobId})`;
    await queues.runs.add("compact", { sessionId: id, runId }, { jobId });

    expect(await stateOnceTaken(jobId)).toBe("delayed");
    expect((await queues.runs.getJob(jobId))?.attemptsMade).toBe(0);
    expect(warnings("compact")).toHaveLength(1);
    expect(warnings("compact")[0]).toMatch(/"level":40/);
    const [waiting] = await fleet.database.sql<{ status: string; session: string }[]>`
      select r.status, s.status as session from runs r join sessions s on s.id = r.session_id where r.id = ${runId}`;
    expect(waiting).toEqual({ status: "queued", session: "active" });

    await waitFor(
      async () => (await client.getSession(id)).status === "parked",
      40_000,
      "the session to be parked",
    );
    const [row] = await fleet.database.sql<{ parked_reason: string }[]>`
      select parked_reason from sessions where id = ${id}`;
    expect(row!.parked_reason).toMatch(
      /^invalid_agent: job "compact" is of a kind this worker does not know \(no worker of this fleet took it for \d+ s, FLEET_NEWER_AGENT_WAIT_MS/,
    );
    const [run] = await fleet.database.sql<{ status: string; ended_reason: string; error: string }[]>`
      select status, ended_reason, error from runs where id = ${runId}`;
    expect(run).toMatchObject({ status: "ended", ended_reason: "invalid_agent" });
    expect(run!.error).toContain('job "compact"');
    // Handed back once a second over the 6 s bound, warned about once; the job completed.
    expect(warnings("compact")).toHaveLength(1);
    await waitFor(
      async () => (await (await queues.runs.getJob(jobId))?.getState()) === "completed",
      10_000,
      "the job to complete",
    );
    expect(worker.output()).not.toMatch(/job failed/);
    expect((await client.getSession(id)).messages).toEqual([]);
  }, 60_000);

  it("a job naming no run is failed only after the bound, with the reason", async () => {
    const jobId = `reindex-${randomUUID()}`;
    await queues.runs.add("reindex", { batchId: randomUUID() }, { jobId });
    expect(await stateOnceTaken(jobId)).toBe("delayed");
    await waitFor(
      async () => (await (await queues.runs.getJob(jobId))?.getState()) === "failed",
      40_000,
      "the job to fail",
    );
    const job = await queues.runs.getJob(jobId);
    expect(job?.failedReason).toMatch(/^job "reindex" is of a kind this worker does not know/);
    expect(warnings("reindex")).toHaveLength(1);
  }, 60_000);
});
