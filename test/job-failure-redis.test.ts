/**
 * What a failed job leaves in Redis. BullMQ keeps the error a job's processor threw on the
 * job's hash — `failedReason` (its message) and `stacktrace` (its stack, each attempt's) — for
 * as long as the job is kept (a failed one: a week). A fault's message may quote a key, a
 * prompt or a tool's output, and its stack the worker's files; both were stored as thrown.
 * Now the worker hands BullMQ the text the run's `error` gets (its secrets scrubbed, clipped)
 * and no stack (bull-worker.ts). Real API, worker (in this process), Postgres and Redis; the
 * job's hash read with HGETALL.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { queueFailure } from "../src/shared/bull-worker.js";
import { bullmq } from "../src/shared/cjs-packages.js";
import { QUEUES } from "../src/shared/queues.js";
import { defineTool } from "../src/worker/tools/registry.js";
import { type RunningWorker, startWorker } from "../src/worker/worker.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

const SECRET = "redis-kept-secret-0123456789";
const ENV_NAME = "JOB_FAILURE_REDIS_TEST_API_KEY";

let fleet: FleetEnv;
let client: FleetClient;
let worker: RunningWorker;

/** The next tool call's fault, thrown from the worker's own handling of the call (a getter with a bug). */
let fault: (() => never) | null = null;
const lookup = defineTool({
  name: "lookup",
  description: "Looks a key up.",
  parameters: { type: "object", properties: { key: { type: "string" } } },
  async run() {
    return "found";
  },
});
Object.defineProperty(lookup, "timeoutMs", {
  get() {
    const now = fault;
    fault = null;
    return now ? now() : undefined;
  },
});

beforeAll(async () => {
  process.env[ENV_NAME] = SECRET;
  fleet = await createFleetEnv("job-failure-redis");
  ({ client } = await fleet.startApi());
  worker = await startWorker(
    { ...fleet.config, logLevel: "silent" },
    { serveMetrics: false, tools: [lookup] },
  );
}, 60_000);
afterAll(async () => {
  await worker?.stop();
  await fleet?.close();
  delete process.env[ENV_NAME];
});

describe("a job that failed on an unexpected error", () => {
  it("keeps in Redis the run's scrubbed error and no stack", async () => {
    fault = () => {
      throw new Error(`lookup failed with key ${SECRET}`);
    };
    const session = await client.createSession({
      agent: {
        model: {
          provider: "scripted",
          steps: [{ toolCalls: [{ name: "lookup", arguments: { key: "k" } }] }, { text: "resumed" }],
        },
        tools: ["lookup"],
      },
    });
    const { runId } = await client.send(session.id, "go");
    await waitFor(
      async () => (await client.getSession(session.id)).runs.some((r) => r.endedReason === "completed"),
      60_000,
      "the resume after the crash to complete",
    );
    const crashed = (await client.getSession(session.id)).runs.find((r) => r.id === runId)!;
    expect(crashed.error).toBe("lookup failed with key [redacted]");
    const hash = await fleet.redis.hgetall(
      `${fleet.config.prefix}:${QUEUES.runs.name}:${QUEUES.runs.jobId({ sessionId: session.id, runId })}`,
    );
    // The job failed once (`atm`: attempts made; its retry found the run left running, ended it,
    // and completed).
    expect(Number(hash.atm)).toBeGreaterThanOrEqual(1);
    expect(hash.failedReason).toBe("lookup failed with key [redacted]");
    expect(JSON.stringify(hash)).not.toContain(SECRET);
    expect(JSON.parse(hash.stacktrace ?? "[]")).toEqual([]);
  }, 90_000);
});

describe("what a processor's throw reaches BullMQ as (pure)", () => {
  it("a failure keeps its name, loses its stack and its secrets; a job's move passes as it is", () => {
    const env = { [ENV_NAME]: SECRET };
    const unrecoverable = queueFailure(new bullmq.UnrecoverableError(`bad job ${SECRET}`), env) as Error;
    expect(unrecoverable.name).toBe("UnrecoverableError");
    expect(unrecoverable.message).toBe("bad job [redacted]");
    expect(unrecoverable.stack).toBe("");
    const thrown = queueFailure("a string thrown", env) as Error;
    expect([thrown.name, thrown.message, thrown.stack]).toEqual(["Error", "a string thrown", ""]);
    const delayed = new bullmq.DelayedError();
    expect(queueFailure(delayed, env)).toBe(delayed);
  });
});
