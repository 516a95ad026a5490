/**
 * A run that appends nothing at its start (process-run.ts `endUnstarted`: a resume with nothing
 * to resume) whose queued run a cancel dropped between the worker's claim and plan and its
 * `startRun`. The start then found the run no longer queued (null: not started by this
 * worker), yet the worker went on as if it had started it: a RUN_STARTED after the cancel's
 * RUN_COMPLETED, a second RUN_COMPLETED (`cancelled`, as the row said; the stream's write
 * skips a run's second end, event-scripts.ts `done`, so only the RUN_STARTED showed), a
 * second count in `fleet_runs_total` and `afterRun` for a run it never ran. Contracts §7:
 * the stream tells the stored history once, and every run ends with exactly one
 * RUN_COMPLETED, whoever ends it. Held deterministically: the worker's Postgres
 * connection goes through a proxy that holds the start's statement until the cancel has
 * answered. Real API, worker (in this process), Postgres and Redis.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { RunQueues } from "../src/shared/queues.js";
import { defineExtension } from "../src/worker/extensions.js";
import { type RunningWorker, startWorker } from "../src/worker/worker.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { type HoldingProxy, holdingProxy } from "./support/holding-proxy.js";
import { storedEvents } from "./support/lost-cancel.js";
import { runsCounted } from "./support/metric-samples.js";

/** Text only fenced-runs.ts `startRun` sends: the start of a queued run by a worker. */
const START_RUN = "(status = 'queued') is true and exists (select 1 from cur)";

let fleet: FleetEnv;
let client: FleetClient;
let proxy: HoldingProxy;
let worker: RunningWorker;
/** The hooks the worker ran, with the run they were given. */
const hooks: string[] = [];

beforeAll(async () => {
  fleet = await createFleetEnv("unstarted-run-cancelled");
  ({ client } = await fleet.startApi());
  proxy = await holdingProxy(5432, START_RUN);
  const url = new URL(fleet.config.databaseUrl);
  url.hostname = "127.0.0.1";
  url.port = String(proxy.port);
  const audit = defineExtension({
    name: "audit",
    beforeRun: (ctx) => void hooks.push(`beforeRun ${ctx.runId}`),
    afterRun: (ctx, result) => void hooks.push(`afterRun ${ctx.runId} ${result.outcome}`),
    onError: (ctx) => void hooks.push(`onError ${ctx.runId}`),
  });
  worker = await startWorker(
    { ...fleet.config, databaseUrl: url.toString(), logLevel: "silent" },
    { serveMetrics: false, extensions: [audit] },
  );
}, 60_000);
afterAll(async () => {
  proxy?.release();
  await worker?.stop();
  await proxy?.close();
  await fleet?.close();
});

describe("a refused resume whose queued run a cancel dropped before the worker started it", () => {
  it("is ended once, by the cancel: no RUN_STARTED, no second RUN_COMPLETED, counted once, no hooks", async () => {
    const { sql } = fleet.database;
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "done" }] } },
    });
    const first = await client.send(id, "hi");
    expect((await client.waitForRun(first.runId, { timeoutMs: 20_000 })).endedReason).toBe("completed");
    await waitFor(
      async () => (await storedEvents(fleet, id)).some((e) => e.type === "RUN_COMPLETED"),
      10_000,
      "the first run's RUN_COMPLETED",
    );
    hooks.length = 0;
    const countedBefore = await runsCounted(worker.metrics.registry);

    // A resume of a completed session that reaches a worker (the API refuses one): it has
    // nothing to resume, so the worker ends it without appending — after its start, held here.
    const [run] = await sql<{ id: string }[]>`
      insert into runs (id, session_id, tenant, kind, trigger, resume_kind)
      values (gen_random_uuid()::text, ${id}, 'default', 'resume', 'api', 'call_model') returning id`;
    const queues = new RunQueues(fleet.redis, fleet.config.prefix);
    try {
      const jobId = await queues.enqueue("resume", { sessionId: id, runId: run!.id });
      await proxy.reached;
      // The cancel drops the run, still queued: it ends it, counts it, writes its RUN_COMPLETED.
      expect((await client.cancelSession(id)).status).toBe("cancelled");
      expect((await client.waitForRun(run!.id, { timeoutMs: 10_000 })).endedReason).toBe("cancelled");
      proxy.release();
      // The worker's job for it ends (the cancel cannot remove a job a worker holds).
      await waitFor(
        async () => {
          const job = await queues.resumes.getJob(jobId);
          return (await job?.isCompleted()) === true || (await job?.isFailed()) === true;
        },
        20_000,
        "the worker's job to end",
      );
    } finally {
      await queues.close();
    }
    const [row] = await sql<{ status: string; ended_reason: string; started_at: Date | null }[]>`
      select status, ended_reason, started_at from runs where id = ${run!.id}`;
    expect(row).toEqual({ status: "ended", ended_reason: "cancelled", started_at: null });
    const events = (await storedEvents(fleet, id)).filter((e) => e.runId === run!.id);
    expect
      .soft(events.map((e) => `${e.type} ${e.outcome ?? ""}`.trim()))
      .toEqual(["RUN_COMPLETED cancelled"]);
    // The API counted it when the cancel ended it; the worker, which did not end it, does not.
    expect.soft(await runsCounted(worker.metrics.registry)).toEqual(countedBefore);
    expect.soft(hooks).toEqual([]);
  }, 60_000);
});
