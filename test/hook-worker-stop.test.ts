/**
 * A worker that stops (SIGTERM, `startWorker().stop()`) does not wait out an extension's
 * pending `afterRun` (or `onError`) past its grace period: once the grace is over the hook's
 * `ctx.signal` is aborted, the hook finishes on its own, the later extensions' hooks are still
 * called, and the job ends — as a stopping worker already did for `onSessionDeleted`. Before, the
 * stop waited for such a hook (up to FLEET_HOOK_TIMEOUT_MS, 30 s by default) until its own
 * bounded wait ran out, 11 s past the grace, and then said "a running job did not end (Redis
 * away?)" and closed its connections under the job, which never gave its session back. The
 * same for a run the stop cut, whose hooks are called after the abort. Real worker (in this
 * process), API, Postgres and Redis.
 */
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { defineExtension } from "../src/worker/extensions.js";
import { startWorker } from "../src/worker/worker.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

let fleet: FleetEnv;
let client: FleetClient;
const GRACE_MS = 1_000;
const calls: string[] = [];

const stuck = defineExtension({
  name: "stuck",
  afterRun(ctx, result) {
    calls.push(`stuck.afterRun ${result.outcome}`);
    // Aborted already for a run the stop cut.
    if (ctx.signal.aborted) calls.push("stuck aborted");
    else ctx.signal.addEventListener("abort", () => calls.push("stuck aborted"));
    return new Promise(() => {});
  },
});
const after = defineExtension({
  name: "after",
  afterRun(_ctx, result) {
    calls.push(`after.afterRun ${result.outcome}`);
  },
});

beforeAll(async () => {
  fleet = await createFleetEnv("hook-worker-stop", {
    env: { SHUTDOWN_GRACE_MS: String(GRACE_MS), FLEET_HOOK_TIMEOUT_MS: "25000" },
  });
  ({ client } = await fleet.startApi());
}, 60_000);
afterAll(async () => {
  await fleet?.close();
});

/** A worker with both extensions; `lines`: what it logged at warn. */
async function worker() {
  const lines: string[] = [];
  const logger = pino({ level: "warn" }, { write: (line: string) => void lines.push(line) });
  const running = await startWorker(fleet.config, {
    serveMetrics: false,
    extensions: [stuck, after],
    logger,
  });
  return { running, lines };
}

describe("a worker stopping while an afterRun hook is pending", () => {
  it("an ended run's afterRun: the stop ends with its grace, the hook's signal aborted, the next hook called", async () => {
    calls.length = 0;
    const { running, lines } = await worker();
    const agent = { model: { provider: "scripted" as const, steps: [{ text: "hi" }] } };
    const session = await client.createSession({ agent });
    const { runId } = await client.send(session.id, "go");
    expect((await client.waitForRun(runId, { timeoutMs: 30_000 })).endedReason).toBe("completed");
    await waitFor(() => calls.includes("stuck.afterRun completed"), 10_000, "afterRun called");
    const started = performance.now();
    await running.stop();
    const tookMs = performance.now() - started;
    expect(lines.filter((line) => line.includes("did not end"))).toEqual([]);
    expect(tookMs).toBeLessThan(GRACE_MS + 4_000);
    expect(calls).toEqual(["stuck.afterRun completed", "stuck aborted", "after.afterRun completed"]);
  }, 60_000);

  it("a run the stop cut: its afterRun hooks are called and not waited out", async () => {
    calls.length = 0;
    const { running, lines } = await worker();
    const agent = {
      model: {
        provider: "scripted" as const,
        steps: [{ toolCalls: [{ name: "sleep", arguments: { ms: 20_000 } }] }, { text: "slept" }],
      },
      tools: ["sleep"],
    };
    const session = await client.createSession({ agent });
    const { runId } = await client.send(session.id, "go");
    await waitFor(
      async () =>
        (
          await fleet.database
            .sql`select 1 from messages where session_id = ${session.id} and role = 'assistant'`
        ).length > 0,
      30_000,
      "the tool call",
    );
    const started = performance.now();
    await running.stop();
    const tookMs = performance.now() - started;
    expect(lines.filter((line) => line.includes("did not end"))).toEqual([]);
    expect(tookMs).toBeLessThan(GRACE_MS + 4_000);
    const [run] = await fleet.database.sql<{ ended_reason: string }[]>`
      select ended_reason from runs where id = ${runId}`;
    expect(run?.ended_reason).toBe("cancelled");
    expect(calls).toEqual(["stuck.afterRun cancelled", "stuck aborted", "after.afterRun cancelled"]);
  }, 60_000);
});
