/**
 * A worker's id names the operator's machine (`<host name>-<pid>-<8 hex>`): operators match
 * it in logs, metrics, CLIENT LIST and the database. Tenants read a run's `workerId` in
 * `GET /v1/sessions/:id`, `GET /v1/runs/:id` and the console (which shows the API's), and
 * there it is an opaque id of the same worker (worker-ref.ts): stable, one per worker, telling
 * the worker apart from another, and never its host name or pid. Real Postgres, Redis, API and
 * an in-process worker.
 */
import { hostname } from "node:os";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { tenantWorkerId } from "../src/shared/worker-ref.js";
import { type RunningWorker, startWorker } from "../src/worker/worker.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

let fleet: FleetEnv;
let client: FleetClient;
let baseUrl: string;
const workers: RunningWorker[] = [];

beforeAll(async () => {
  fleet = await createFleetEnv("tenant-worker-id");
  const started = await fleet.startApi();
  client = started.client;
  baseUrl = `http://127.0.0.1:${started.api.port}`;
}, 60_000);
afterAll(async () => {
  await Promise.all(workers.map((worker) => worker.stop()));
  await fleet?.close();
});

const agent = { model: { provider: "scripted" as const, steps: [{ text: "done" }] } };

/** A session's one run, run to its end by `worker`. */
async function runOn(worker: RunningWorker): Promise<{ sessionId: string; runId: string }> {
  const session = await client.createSession({ agent });
  const { runId } = await client.send(session.id, "go");
  const run = await client.waitForRun(runId, { timeoutMs: 30_000 });
  expect(run.endedReason).toBe("completed");
  const [stored] = await fleet.database.sql<{ worker_id: string }[]>`
    select worker_id from runs where id = ${runId}`;
  // The run was this worker's, as the operator's records say.
  expect(stored?.worker_id).toBe(worker.workerId);
  return { sessionId: session.id, runId };
}

/** The bodies a tenant reads of a run: the session's and the run's, as raw text. */
async function bodies(sessionId: string, runId: string): Promise<string[]> {
  return Promise.all(
    [`/v1/sessions/${sessionId}`, `/v1/runs/${runId}`].map(async (path) => {
      const answer = await fetch(`${baseUrl}${path}`);
      expect(answer.status).toBe(200);
      return answer.text();
    }),
  );
}

describe("a run's workerId as tenants read it", () => {
  it("is an opaque id of its worker, never the worker's host name or pid", async () => {
    const first = await startWorker({ ...fleet.config, logLevel: "silent" }, { serveMetrics: false });
    workers.push(first);
    expect(first.workerId).toContain(`${hostname()}-${process.pid}-`);
    const a = await runOn(first);
    const b = await runOn(first);
    await first.stop();
    workers.length = 0;
    const second = await startWorker({ ...fleet.config, logLevel: "silent" }, { serveMetrics: false });
    workers.push(second);
    const c = await runOn(second);

    for (const { sessionId, runId } of [a, b, c])
      for (const body of await bodies(sessionId, runId)) {
        // Before: `"workerId":"<host name>-<pid>-<8 hex>"` in both bodies.
        expect(body).not.toContain(`${hostname()}-${process.pid}`);
        expect(body).toMatch(/"workerId":"worker-[0-9a-f]{8}"/);
      }
    const seen = async ({ sessionId, runId }: { sessionId: string; runId: string }) => {
      const session = await client.getSession(sessionId);
      const run = await client.getRun(runId);
      expect(session.runs[0]?.workerId).toBe(run.workerId);
      return run.workerId;
    };
    const [ofA, ofB, ofC] = [await seen(a), await seen(b), await seen(c)];
    // Stable for one worker, another for another worker; what the operator can match it with.
    expect(ofA).toBe(ofB);
    expect(ofC).not.toBe(ofA);
    expect(ofA).toBe(tenantWorkerId(first.workerId));
    expect(ofC).toBe(tenantWorkerId(second.workerId));
    expect(ofA).toMatch(/^worker-[0-9a-f]{8}$/);
    expect(first.workerId.endsWith(ofA?.slice("worker-".length) ?? "?")).toBe(true);
  }, 120_000);

  it("a run no worker took has none (pure)", () => {
    expect(tenantWorkerId(null)).toBeNull();
    expect(tenantWorkerId("db7.corp.internal-4242-0a1b2c3d")).toBe("worker-0a1b2c3d");
    // An id of another form (an older release's, an embedding program's): a hash of it.
    const other = tenantWorkerId("db7.corp.internal-4242");
    expect(other).toMatch(/^worker-[0-9a-f]{8}$/);
    expect(other).toBe(tenantWorkerId("db7.corp.internal-4242"));
    expect(other).not.toBe(tenantWorkerId("db8.corp.internal-4242"));
  });
});
