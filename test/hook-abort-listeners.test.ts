/**
 * An extension's hook that listens to `ctx.signal` with a listener that throws (contracts §8:
 * errors in hooks "never lose a message or stop a run"). Node reports a throw from an
 * AbortSignal listener as an uncaught exception, so the worker's last resort stopped the whole
 * process (exit 70) at the first cancel of any session it ran: every other run on it was cut
 * off and resumed elsewhere. Now the listener's throw is logged and counted as the hook's
 * failure, the cancelled run ends `cancelled`, and the worker goes on with the next session.
 * A real worker process, the API, Postgres and Redis.
 */
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { createFleetEnv, type FleetEnv, ROOT, type WorkerProcess, waitFor } from "./support/fleet-env.js";

const EXTENSION = join(ROOT, "test/fixtures/abort-listener-extension.ts");

describe("a hook's abort listener that throws", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let worker: WorkerProcess;

  beforeAll(async () => {
    fleet = await createFleetEnv("hookabortlisteners");
    ({ client } = await fleet.startApi());
    worker = await fleet.spawnWorker({}, ["--extensions", EXTENSION]);
  }, 60_000);
  afterAll(async () => fleet?.close());

  it("is the hook's failure: the run ends cancelled and the worker goes on", async () => {
    const sleepy = await client.createSession({
      metadata: { careless: true },
      agent: {
        model: {
          provider: "scripted",
          steps: [{ toolCalls: [{ id: "nap", name: "sleep", arguments: { ms: 60_000 } }] }, { text: "no" }],
        },
        tools: ["sleep"],
      },
    });
    const { runId } = await client.send(sleepy.id, "sleep");
    await waitFor(
      async () => (await client.getSession(sleepy.id)).messages.some((m) => m.role === "assistant"),
      20_000,
      "the run inside its sleep",
    );
    await client.cancelSession(sleepy.id);
    const cancelled = await client.waitForRun(runId, { timeoutMs: 20_000 }).catch((error: Error) => {
      throw new Error(`${error.message}; worker: ${worker.output().slice(-600)}`);
    });
    expect(cancelled.endedReason).toBe("cancelled");

    // The same worker runs the next session (before: it had exited 70, "uncaught exception").
    const next = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "still here" }] } },
    });
    const sent = await client.send(next.id, "hello");
    const run = await client.waitForRun(sent.runId, { timeoutMs: 20_000 });
    expect(run.endedReason).toBe("completed");
    expect(worker.child.exitCode).toBeNull();
    expect(worker.output()).not.toContain("uncaught exception");
    // Each listener's throw (or rejection) was logged as the hook's failure, with its message.
    await waitFor(
      async () =>
        worker.output().includes("the careless clean-up failed") &&
        worker.output().includes("the careless async clean-up failed") &&
        worker.output().includes("the careless onabort failed"),
      10_000,
      "the listeners' failures logged",
    );
    expect(worker.output()).toContain("extension hook failed");
  }, 90_000);

  it("adds one listener to a job's signal however many runs the job takes", async () => {
    // The first run sleeps while ten more messages queue behind it: one job runs all eleven.
    const { id } = await client.createSession({
      agent: {
        model: {
          provider: "scripted",
          steps: [
            { toolCalls: [{ id: "nap", name: "sleep", arguments: { ms: 2_000 } }] },
            ...Array.from({ length: 11 }, (_, i) => ({ text: `answer ${i}` })),
          ],
        },
        tools: ["sleep"],
      },
    });
    const first = await client.send(id, "message 0");
    await waitFor(
      async () => (await client.getSession(id)).messages.some((m) => m.role === "assistant"),
      20_000,
      "the first run inside its sleep",
    );
    let last = first.runId;
    for (let i = 1; i <= 10; i++) last = (await client.send(id, `message ${i}`)).runId;
    expect((await client.waitForRun(last, { timeoutMs: 30_000 })).endedReason).toBe("completed");
    const runs = (await client.getSession(id)).runs;
    expect(new Set(runs.map((run) => run.workerId)).size).toBe(1);
    // Before: a signal per run, each with its listener on the job's signal.
    expect(worker.output()).not.toContain("MaxListenersExceededWarning");
  }, 90_000);
  it("hands each run a signal whose listeners go with the run", async () => {
    // Two runs in one job: the first run's listener, added by its beforeRun, does not hear the
    // second run's cancel (before: every run's hooks shared the job's signal, and its listeners
    // piled up there for the job's life).
    const abortLog = join(mkdtempSync(join(tmpdir(), "abort-log-")), "aborts");
    const { id } = await client.createSession({
      metadata: { abortLog },
      agent: {
        model: {
          provider: "scripted",
          steps: [
            { toolCalls: [{ id: "nap", name: "sleep", arguments: { ms: 2_000 } }] },
            { text: "one" },
            { toolCalls: [{ id: "long", name: "sleep", arguments: { ms: 60_000 } }] },
            { text: "no" },
          ],
        },
        tools: ["sleep"],
      },
    });
    const first = await client.send(id, "first");
    await waitFor(
      async () => (await client.getSession(id)).messages.some((m) => m.role === "assistant"),
      20_000,
      "the first run inside its sleep",
    );
    const second = await client.send(id, "second");
    expect((await client.waitForRun(first.runId, { timeoutMs: 20_000 })).endedReason).toBe("completed");
    await waitFor(
      async () => (await client.getSession(id)).messages.filter((m) => m.role === "assistant").length >= 3,
      20_000,
      "the second run inside its sleep",
    );
    await client.cancelSession(id);
    expect((await client.waitForRun(second.runId, { timeoutMs: 20_000 })).endedReason).toBe("cancelled");
    const runs = (await client.getSession(id)).runs;
    expect(new Set(runs.map((run) => run.workerId)).size).toBe(1);
    await waitFor(async () => existsSync(abortLog), 10_000, "the second run's listener heard its cancel");
    expect(readFileSync(abortLog, "utf8").trim().split("\n")).toEqual([second.runId]);
  }, 90_000);
});
