/**
 * Extensions' hooks as an extension author relies on them (contracts §8), with a real API,
 * worker (in this process, the extension given in code), Postgres and Redis:
 * - `beforeRun` and `afterRun` pair: per-run state an extension sets up in `beforeRun` and
 *   releases in `afterRun` never meets an `afterRun` without its `beforeRun`. A resume that
 *   reached a worker with nothing to resume called `afterRun` and `onError` alone: an
 *   extension that keeps a span, a timer or a slot per run found none to close.
 * - A `beforeRun` that throws leaves its message on the run, which the session's tenant reads
 *   (`GET /v1/runs/:id`): scrubbed as a job's failure is (job-failure.ts) — the keys it quotes
 *   and the worker's file paths it names. It was stored as thrown.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { RunQueues } from "../src/shared/queues.js";
import { defineExtension } from "../src/worker/extensions.js";
import { type RunningWorker, startWorker } from "../src/worker/worker.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

let fleet: FleetEnv;
let client: FleetClient;
let worker: RunningWorker;
let queues: RunQueues;

type Call = { hook: string; sessionId: string; runId: string; detail?: string };
const calls: Call[] = [];
/** What an author keeps per run: set in beforeRun, released in afterRun. */
const open = new Map<string, number>();
/** afterRun calls that found no state of their run. */
const unpaired: string[] = [];

const spans = defineExtension({
  name: "spans",
  beforeRun(ctx) {
    calls.push({ hook: "beforeRun", sessionId: ctx.sessionId, runId: ctx.runId });
    open.set(ctx.runId, Date.now());
    const meta = ctx.metadata as { throwBefore?: string };
    if (meta.throwBefore === "path") {
      const file = "/srv/fleet/extensions/audit/credentials.json";
      throw Object.assign(new Error(`ENOENT: no such file or directory, open '${file}'`), {
        code: "ENOENT",
        path: file,
      });
    }
    if (meta.throwBefore === "key")
      throw new Error("audit service said 401 to Authorization: Bearer abcdefghijklmnop1234567890");
  },
  afterRun(ctx, result) {
    calls.push({ hook: "afterRun", sessionId: ctx.sessionId, runId: ctx.runId, detail: result.outcome });
    if (!open.delete(ctx.runId)) unpaired.push(ctx.runId);
  },
  onError(ctx, error) {
    calls.push({ hook: "onError", sessionId: ctx.sessionId, runId: ctx.runId, detail: error.reason });
  },
});

beforeAll(async () => {
  fleet = await createFleetEnv("hook-pairing");
  ({ client } = await fleet.startApi());
  worker = await startWorker(
    { ...fleet.config, logLevel: "silent" },
    { serveMetrics: false, extensions: [spans] },
  );
  queues = new RunQueues(fleet.redis, fleet.config.prefix);
}, 60_000);
afterAll(async () => {
  await queues?.close();
  await worker?.stop();
  await fleet?.close();
});

const agent = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

describe("beforeRun and afterRun pair", () => {
  it("a resume with nothing to resume: beforeRun, afterRun, onError (with the reason), in that order", async () => {
    const finished = await client.createSession({
      agent,
      messages: [
        { role: "user", content: "hi" },
        { role: "assistant", content: "hello", stopReason: "end_turn" },
      ],
    });
    // A resume accepted while the session needed one, which reaches the worker after its
    // answer came (resume-io-races.test.ts): queued here directly.
    const [run] = await fleet.database.sql<{ id: string }[]>`
      insert into runs (id, session_id, tenant, kind, trigger, resume_kind)
      values (gen_random_uuid()::text, ${finished.id}, 'default', 'resume', 'api', 'call_model') returning id`;
    await queues.enqueue("resume", { sessionId: finished.id, runId: run!.id });
    expect((await client.waitForRun(run!.id, { timeoutMs: 20_000 })).endedReason).toBe("nothing_to_resume");
    const ofRun = () => calls.filter((c) => c.runId === run!.id);
    await waitFor(async () => ofRun().some((c) => c.hook === "onError"), 10_000, "onError");
    // Before: ["afterRun", "onError"], and afterRun found no state of its run.
    expect(ofRun().map((c) => c.hook)).toEqual(["beforeRun", "afterRun", "onError"]);
    expect(ofRun()[1]!.detail).toBe("nothing_to_resume");
    expect(ofRun()[2]!.detail).toBe("completed");
    expect(unpaired).not.toContain(run!.id);
    expect(open.has(run!.id)).toBe(false);
  }, 60_000);

  it("an ordinary run pairs as well", async () => {
    const session = await client.createSession({ agent });
    const { runId } = await client.send(session.id, "go");
    expect((await client.waitForRun(runId, { timeoutMs: 20_000 })).endedReason).toBe("completed");
    await waitFor(
      async () => calls.some((c) => c.runId === runId && c.hook === "afterRun"),
      10_000,
      "afterRun",
    );
    expect(calls.filter((c) => c.runId === runId).map((c) => c.hook)).toEqual(["beforeRun", "afterRun"]);
    expect(unpaired).not.toContain(runId);
  }, 60_000);
});

describe("a beforeRun's failure on the run is scrubbed", () => {
  for (const [kind, leaked, said] of [
    [
      "path",
      "/srv/fleet/extensions/audit/credentials.json",
      `beforeRun hook of extension "spans" failed: ENOENT: no such file or directory, open '[a path of the worker]'`,
    ],
    ["key", "abcdefghijklmnop1234567890", "[redacted]"],
  ] as const)
    it(`a ${kind} it names does not reach the tenant`, async () => {
      const session = await client.createSession({ agent, metadata: { throwBefore: kind } });
      const { runId } = await client.send(session.id, "go");
      const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
      expect(run.endedReason).toBe("failed");
      // Before: the run's error carried it as thrown.
      expect(run.error).not.toContain(leaked);
      expect(run.error).toContain(said);
      expect(run.error).toMatch(/^beforeRun hook of extension "spans" failed: /);
      await waitFor(
        async () => calls.some((c) => c.runId === runId && c.hook === "onError"),
        10_000,
        "onError",
      );
      expect(unpaired).not.toContain(runId);
    }, 60_000);
});
