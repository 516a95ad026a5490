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

/** `hook` is `spans`' own hook, or `gate.…` / `last.…` for the other two extensions'. */
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

/** Holds a gate's beforeRun until the tests end. */
let release: () => void = () => {};
const held = new Promise<void>((resolve) => {
  release = resolve;
});

/** Loaded before `spans`: a gate that refuses (throws) or holds the runs its metadata names. */
const gate = defineExtension({
  name: "gate",
  async beforeRun(ctx) {
    calls.push({ hook: "gate.beforeRun", sessionId: ctx.sessionId, runId: ctx.runId });
    const { gate: what } = ctx.metadata as { gate?: string };
    if (what === "throw") throw new Error("refused by the gate");
    if (what === "hold") await held;
  },
  afterRun(ctx, result) {
    calls.push({ hook: "gate.afterRun", sessionId: ctx.sessionId, runId: ctx.runId, detail: result.outcome });
  },
});

/** Loaded after `spans`, with no beforeRun: its afterRun is every run's last hook. */
const last = defineExtension({
  name: "last",
  afterRun(ctx) {
    calls.push({ hook: "last.afterRun", sessionId: ctx.sessionId, runId: ctx.runId });
  },
});

beforeAll(async () => {
  fleet = await createFleetEnv("hook-pairing");
  ({ client } = await fleet.startApi());
  worker = await startWorker(
    { ...fleet.config, logLevel: "silent" },
    { serveMetrics: false, extensions: [gate, spans, last] },
  );
  queues = new RunQueues(fleet.redis, fleet.config.prefix);
}, 60_000);
afterAll(async () => {
  release();
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
    const ofRun = () => calls.filter((c) => c.runId === run!.id && !c.hook.includes("."));
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
    expect(calls.filter((c) => c.runId === runId && !c.hook.includes(".")).map((c) => c.hook)).toEqual([
      "beforeRun",
      "afterRun",
    ]);
    expect(unpaired).not.toContain(runId);
  }, 60_000);
});

describe("with several extensions, each one's afterRun pairs with its own beforeRun", () => {
  /** The hooks `spans` saw for `runId` once the run's last hook ran. */
  const spansOf = async (runId: string) => {
    await waitFor(
      async () => calls.some((c) => c.runId === runId && c.hook === "last.afterRun"),
      10_000,
      "the last afterRun",
    );
    return calls.filter((c) => c.runId === runId && !c.hook.includes(".")).map((c) => c.hook);
  };

  it("an earlier extension's beforeRun throws: the later ones' beforeRun still runs, then afterRun and onError", async () => {
    const session = await client.createSession({ agent, metadata: { gate: "throw" } });
    const { runId } = await client.send(session.id, "go");
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.endedReason).toBe("failed");
    expect(run.error).toBe('beforeRun hook of extension "gate" failed: refused by the gate');
    expect((await client.getSession(session.id)).messages.map((m) => m.role)).toEqual(["user"]);
    // Before: ["afterRun", "onError"] — the run had never begun for `spans`.
    expect(await spansOf(runId)).toEqual(["beforeRun", "afterRun", "onError"]);
    expect(unpaired).not.toContain(runId);
  }, 60_000);

  it("cancelled while an earlier extension's beforeRun is pending: the later ones get no afterRun", async () => {
    const session = await client.createSession({ agent, metadata: { gate: "hold" } });
    const { runId } = await client.send(session.id, "go");
    await waitFor(
      async () => calls.some((c) => c.runId === runId && c.hook === "gate.beforeRun"),
      20_000,
      "the gate",
    );
    await client.cancelSession(session.id);
    expect((await client.waitForRun(runId, { timeoutMs: 30_000 })).endedReason).toBe("cancelled");
    // Before: ["afterRun"] — `spans` was told a run ended that it was never told began.
    expect(await spansOf(runId)).toEqual([]);
    expect(unpaired).not.toContain(runId);
    // The gate, whose beforeRun was called (and is still pending), hears the run's end.
    expect(calls.filter((c) => c.runId === runId && c.hook === "gate.afterRun")).toMatchObject([
      { detail: "cancelled" },
    ]);
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
