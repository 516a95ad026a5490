/**
 * An explicit resume with another model while the session's automatic resume waits out its
 * backoff (resume-semantics §4: a resume may name another model, "e.g. when one provider keeps
 * failing" — the very case in which an automatic resume is always waiting). The waiting
 * automatic resume, which holds no input and has not started, gives way: it ends `cancelled`
 * (counted, its RUN_COMPLETED written, its job removed) and the caller's resume runs at once on
 * the model it named. Before, the API answered `409 running` until the session was parked.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetApiError, FleetClient } from "../src/producer/client.js";
import { loadConfig } from "../src/shared/config.js";
import { QUEUES, RunQueues } from "../src/shared/queues.js";
import { type RunningSweeper, startSweeper } from "../src/sweeper/sweeper-process.js";
import { createFleetEnv, type FleetEnv, type WorkerProcess, waitFor } from "./support/fleet-env.js";
import { sampleValue } from "./support/metric-samples.js";

describe("a resume with another model while an automatic resume waits out its backoff", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let apiUrl: string;
  let sweeper: RunningSweeper;
  let worker: WorkerProcess;

  beforeAll(async () => {
    // A backoff long enough that the second automatic resume is still waiting when the caller asks.
    fleet = await createFleetEnv("resumemodelbackoff", { env: { SWEEPER_BACKOFF_MS: "60000" } });
    const started = await fleet.startApi();
    client = started.client;
    apiUrl = started.api.url;
    sweeper = await startSweeper({ ...loadConfig(fleet.env), logLevel: "silent" }, { serveMetrics: false });
    worker = await fleet.spawnWorker();
  });
  afterAll(async () => {
    await sweeper?.stop();
    await fleet?.close();
  });

  it("replaces the waiting automatic resume and runs on the named model at once", async () => {
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "x", fault: "connection" }] } },
    });
    await client.send(id, "hello");
    // The run failed, the first automatic resume (no backoff) failed, the second one waits.
    await waitFor(
      async () => {
        const { runs } = await client.getSession(id);
        return runs.length === 3 && runs[2]!.status === "queued";
      },
      30_000,
      "an automatic resume waiting out its backoff",
    );
    const waiting = (await client.getSession(id)).runs[2]!;
    expect(waiting).toMatchObject({ kind: "resume", status: "queued", resumeKind: "call_model" });
    expect(["sweeper", "worker"]).toContain(waiting.trigger);

    const other = { provider: "scripted" as const, steps: [{ text: "from the other model" }] };
    const answer = await client.resume(id, { model: other }).catch((e: FleetApiError) => e);
    expect(answer, `answered ${(answer as FleetApiError).message}`).toMatchObject({ kind: "call_model" });
    const { runId } = answer as { runId: string };
    expect(runId).not.toBe(waiting.id);

    await waitFor(async () => (await client.getSession(id)).status === "completed", 15_000, "completed");
    const done = await client.getSession(id);
    expect(done.messages.map(({ role, content }) => [role, content])).toEqual([
      ["user", "hello"],
      ["assistant", "from the other model"],
    ]);
    expect(done.runs.map((r) => [r.kind, r.trigger, r.endedReason])).toEqual([
      ["run", "api", "provider_error"],
      ["resume", waiting.trigger, "provider_error"],
      ["resume", waiting.trigger, "cancelled"],
      ["resume", "api", "completed"],
    ]);
    expect(done.runs[2]).toMatchObject({ id: waiting.id, startedAt: null });
    expect(done.runs[3]).toMatchObject({ id: runId, model: other });
    // The replaced resume's job is gone, and nothing resumed the completed session afterwards.
    const queues = new RunQueues(fleet.redis, fleet.config.prefix);
    try {
      expect(
        await queues.resumes.getJob(QUEUES.resumes.jobId({ sessionId: id, runId: waiting.id })),
      ).toBeUndefined();
    } finally {
      await queues.close();
    }
    const metrics = await (await fetch(`${apiUrl}/metrics`)).text();
    expect(sampleValue(metrics, "fleet_runs_total", { kind: "resume", outcome: "cancelled" })).toBe(1);
    expect(worker.child.exitCode).toBeNull();
  }, 60_000);

  it("a waiting resume someone asked for with another model is not replaced: 409 running", async () => {
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "x", fault: "connection" }] } },
    });
    await client.send(id, "hello");
    await waitFor(
      async () => {
        const { runs } = await client.getSession(id);
        return runs.length === 3 && runs[2]!.status === "queued";
      },
      30_000,
      "an automatic resume waiting out its backoff",
    );
    const first = { provider: "scripted" as const, steps: [{ text: "first", delayMs: 3_000 }] };
    const second = { provider: "scripted" as const, steps: [{ text: "second" }] };
    const asked = await client.resume(id, { model: first });
    const again = await client.resume(id, { model: second }).catch((e: FleetApiError) => e);
    expect([(again as FleetApiError).status, (again as FleetApiError).reason]).toEqual([409, "running"]);
    await waitFor(async () => (await client.getSession(id)).status === "completed", 15_000, "completed");
    const done = await client.getSession(id);
    expect(done.messages.at(-1)!.content).toBe("first");
    expect(done.runs.at(-1)).toMatchObject({ id: asked.runId, endedReason: "completed" });
  }, 60_000);
});
