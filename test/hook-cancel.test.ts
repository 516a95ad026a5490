/**
 * A session cancelled while an extension's `beforeRun` (or `onMessage`) is still pending
 * (contracts §8, §9): a cancel aborts a running run "as on SIGTERM past the grace period".
 * The worker waited for the hook until FLEET_HOOK_TIMEOUT_MS (30 s by default) and then
 * ended the run `failed` ("did not finish within …") with `onError`, as if the hook had
 * broken, not the user cancelled; a pending `onMessage` was counted a failed hook at its
 * timeout, and only then did the run see the cancel. Now the run stops waiting for the hook when it is
 * aborted and ends `cancelled`; the model is never asked. The same for an `onCommitted` still
 * pending (here on the model's step asking for a tool): the cancel waited it out (counted a
 * failed hook) before the run saw it; now the run stops waiting, its tool never starts, and the
 * messages it still commits (the call answered as cancelled) reach the hook too. And a cancel
 * whose signal the worker never read, committed during the run's last model call: afterRun sees
 * `cancelled`, whether the run's end stored its answer or nothing. Real API, worker (in this
 * process, with the extension given in code), Postgres and Redis.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { defineExtension } from "../src/worker/extensions.js";
import { type RunningWorker, startWorker } from "../src/worker/worker.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { cancelUnheard, holdModelCall } from "./support/lost-cancel.js";

let fleet: FleetEnv;
let client: FleetClient;
let worker: RunningWorker;
const calls: { hook: string; sessionId: string; detail?: string }[] = [];
/** Holds the pending hooks; released when the test ends. */
let release: () => void = () => {};
const held = new Promise<void>((resolve) => {
  release = resolve;
});

const slow = defineExtension({
  name: "slow",
  async beforeRun(ctx) {
    calls.push({ hook: "beforeRun", sessionId: ctx.sessionId });
    if ((ctx.metadata as { hold?: string }).hold === "beforeRun") await held;
  },
  async onMessage(ctx) {
    calls.push({ hook: "onMessage", sessionId: ctx.sessionId });
    if ((ctx.metadata as { hold?: string }).hold === "onMessage") await held;
  },
  afterRun(ctx, result) {
    calls.push({ hook: "afterRun", sessionId: ctx.sessionId, detail: result.outcome });
  },
  onError(ctx, error) {
    calls.push({ hook: "onError", sessionId: ctx.sessionId, detail: error.message });
  },
  async onCommitted(ctx, { message }) {
    calls.push({ hook: "onCommitted", sessionId: ctx.sessionId, detail: message.role });
    if ((ctx.metadata as { hold?: string }).hold !== "onCommitted" || message.role !== "assistant") return;
    ctx.signal.addEventListener("abort", () => aborted.add(ctx.sessionId), { once: true });
    await held; // ignores its signal
  },
});
/** Sessions whose held hook saw its signal aborted. */
const aborted = new Set<string>();

beforeAll(async () => {
  fleet = await createFleetEnv("hook-cancel");
  ({ client } = await fleet.startApi());
  worker = await startWorker(
    // Short enough that the run before the fix ends (failed) within the test's wait.
    { ...fleet.config, logLevel: "silent", hookTimeoutMs: 6_000 },
    { serveMetrics: false, extensions: [slow] },
  );
}, 60_000);
afterAll(async () => {
  release();
  await worker?.stop();
  await fleet?.close();
});

describe("a cancel while a hook before the model call is pending", () => {
  for (const hook of ["beforeRun", "onMessage"] as const)
    it(`${hook}: the run ends cancelled, no onError, the model never asked`, async () => {
      const agent = { model: { provider: "scripted" as const, steps: [{ text: "should never be said" }] } };
      const session = await client.createSession({ agent, metadata: { hold: hook } });
      const { runId } = await client.send(session.id, "go");
      await waitFor(
        async () => calls.some((c) => c.hook === hook && c.sessionId === session.id),
        20_000,
        `the ${hook} hook`,
      );
      await client.cancelSession(session.id);
      const run = await client.waitForRun(runId, { timeoutMs: 30_000 });
      // Before: "failed", error 'the beforeRun hook of extension "slow" did not finish within 6000 ms'.
      expect(run.endedReason).toBe("cancelled");
      expect((await client.getSession(session.id)).messages.map((m) => m.role)).toEqual(["user"]);
      await waitFor(
        async () => calls.some((c) => c.hook === "afterRun" && c.sessionId === session.id),
        10_000,
        "afterRun",
      );
      const ofSession = calls.filter((c) => c.sessionId === session.id && c.hook !== "beforeRun");
      expect(ofSession.filter((c) => c.hook === "afterRun")).toEqual([
        { hook: "afterRun", sessionId: session.id, detail: "cancelled" },
      ]);
      expect(ofSession.some((c) => c.hook === "onError")).toBe(false);
      // Nor did the hook fail: the run stopped waiting for it (before: counted failed at its timeout).
      const failures = (await worker.metrics.hookFailures.get()).values.find((v) => v.labels.hook === hook);
      expect(failures?.value ?? 0).toBe(0);
    }, 60_000);
});

describe("a cancel while an onCommitted hook is pending", () => {
  it("ends the run cancelled without waiting for the hook, whose signal is aborted; no tool starts", async () => {
    const agent = {
      model: {
        provider: "scripted" as const,
        steps: [
          { toolCalls: [{ name: "fail", arguments: { message: "should never run" } }] },
          { text: "no" },
        ],
      },
      tools: ["fail"],
    };
    const session = await client.createSession({ agent, metadata: { hold: "onCommitted" } });
    const { runId } = await client.send(session.id, "go");
    const ofSession = () => calls.filter((c) => c.sessionId === session.id);
    await waitFor(
      async () => ofSession().some((c) => c.hook === "onCommitted" && c.detail === "assistant"),
      20_000,
      "the onCommitted hook of the model's step",
    );
    await client.cancelSession(session.id);
    const run = await client.waitForRun(runId, { timeoutMs: 30_000 });
    expect(run.endedReason).toBe("cancelled");
    expect(aborted.has(session.id)).toBe(true);
    const messages = (await client.getSession(session.id)).messages;
    expect(messages.map((m) => m.role)).toEqual(["user", "assistant", "tool"]);
    expect(JSON.stringify(messages[2])).toContain("Cancelled: the run was stopped before this tool started");
    await waitFor(async () => ofSession().some((c) => c.hook === "afterRun"), 10_000, "afterRun");
    // Every committed message reached the hook, the cancelled call's answer too.
    expect(
      ofSession()
        .filter((c) => c.hook === "onCommitted")
        .map((c) => c.detail),
    ).toEqual(["user", "assistant", "tool"]);
    expect(ofSession().filter((c) => c.hook === "afterRun")).toEqual([
      { hook: "afterRun", sessionId: session.id, detail: "cancelled" },
    ]);
    // Before: the run waited out FLEET_HOOK_TIMEOUT_MS and counted the hook failed.
    const failures = (await worker.metrics.hookFailures.get()).values.find(
      (v) => v.labels.hook === "onCommitted",
    );
    expect(failures?.value ?? 0).toBe(0);
  }, 60_000);
});

describe("a cancel whose signal no worker read, during the run's last model call", () => {
  // The cancel commits while the model call is out and the worker never hears of it (its signal
  // lost): the run comes to its end as if nothing happened. A worker with hooks appends the
  // last step on its own (they see it first) or, when the call failed, appends nothing at its
  // end; either way the run ends `cancelled`, and afterRun says so (contracts §8, §9).
  const cases = [
    { how: "its answer stored", steps: [{ text: "done" }], roles: ["user", "assistant"] },
    { how: "its call refused for good", steps: [{ fault: "rejected" as const }], roles: ["user"] },
  ];
  for (const { how, steps, roles } of cases)
    it(`${how}: afterRun sees \`cancelled\`, no onError, nothing parked`, async () => {
      const session = await client.createSession({ agent: { model: { provider: "scripted", steps } } });
      const call = holdModelCall(session.id);
      const { runId } = await client.send(session.id, "go");
      await call.reached;
      expect(await cancelUnheard(fleet.database, session.id)).toEqual([runId]);
      call.release();
      expect((await client.waitForRun(runId, { timeoutMs: 30_000 })).endedReason).toBe("cancelled");
      const ofSession = () => calls.filter((c) => c.sessionId === session.id);
      await waitFor(async () => ofSession().some((c) => c.hook === "afterRun"), 10_000, "afterRun");
      expect(ofSession().filter((c) => c.hook === "afterRun" || c.hook === "onError")).toEqual([
        { hook: "afterRun", sessionId: session.id, detail: "cancelled" },
      ]);
      const after = await client.getSession(session.id);
      expect([after.status, after.parkedReason ?? null]).toEqual(["cancelled", null]);
      expect(after.messages.map((m) => m.role)).toEqual(roles);
    }, 60_000);
});
