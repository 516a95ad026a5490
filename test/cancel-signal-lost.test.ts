/**
 * A cancel whose signal to the workers was lost (worker-signals.ts `cancelChannel`: a Redis
 * hiccup, the worker's subscriber reconnecting), then a new message that re-opened the session
 * (contracts §9) before the cancelled run's next append. That append answered the session's
 * status, `active` again, and the run went on, its next tool included, though the user had
 * cancelled it. The cancel now keeps the runs it found running (`sessions.cancelled_runs`)
 * and the append answers that mark too: the run ends `cancelled` before its next tool, and the
 * new message's run goes on. The cancel here is the API's own statement (batch-cancel.ts) with
 * no signal published; the new message goes through the real API. A cancel during the run's last
 * model call (held until the test has cancelled: support/lost-cancel.ts) ends the run `cancelled`
 * too, whether its end stores its answer or nothing (a call refused for good). Real API, worker
 * (in this process), Postgres and Redis.
 */
import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { parseAgentConfig } from "../src/shared/agent-config.js";
import { type Fence, FencedWrites } from "../src/shared/store/fenced-writes.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { type RunningWorker, startWorker } from "../src/worker/worker.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { cancelUnheard, eventsOnceEnded, holdModelCall } from "./support/lost-cancel.js";

let fleet: FleetEnv;
let client: FleetClient;
let worker: RunningWorker;

beforeAll(async () => {
  fleet = await createFleetEnv("cancel-signal-lost");
  ({ client } = await fleet.startApi());
  worker = await startWorker({ ...fleet.config, logLevel: "silent" }, { serveMetrics: false });
}, 60_000);
afterAll(async () => {
  await worker?.stop();
  await fleet?.close();
});

/** The session's stored messages of `role`, in order. */
async function messagesOf(sessionId: string, role: string) {
  return fleet.database.sql<{ run_id: string | null; success: boolean | null; content: string | null }[]>`
    select run_id, success, content from messages
     where session_id = ${sessionId} and role = ${role} order by seq`;
}

describe("a cancel whose signal no worker read, then a new message", () => {
  it("still stops the cancelled run before its next tool; the new message's run goes on", async () => {
    const agent = {
      model: {
        provider: "scripted" as const,
        steps: [
          { toolCalls: [{ name: "sleep", arguments: { ms: 1 } }] },
          // The step the cancel and the new message come during: its tool must not run.
          { delayMs: 5_000, toolCalls: [{ name: "sleep", arguments: { ms: 1 } }] },
          { text: "done" },
        ],
      },
      tools: ["sleep"],
    };
    const { id } = await client.createSession({ agent });
    const first = await client.send(id, "go");
    await waitFor(async () => (await messagesOf(id, "tool")).length === 1, 30_000, "the first tool's result");
    // The cancel, its signal lost: nothing is published.
    expect(await cancelUnheard(fleet.database, id)).toEqual([first.runId]);
    const second = await client.send(id, "again");
    expect((await client.getSession(id)).status).not.toBe("cancelled");
    // Both came while the second step's model call was still out (its message not appended).
    expect(await messagesOf(id, "assistant")).toHaveLength(1);

    expect((await client.waitForRun(first.runId, { timeoutMs: 30_000 })).endedReason).toBe("cancelled");
    // The second step's tool never ran: its result is the one a cancel writes.
    const tools = await messagesOf(id, "tool");
    expect(tools.filter((tool) => tool.run_id === first.runId && tool.success === true)).toHaveLength(1);
    expect((await client.waitForRun(second.runId, { timeoutMs: 30_000 })).endedReason).toBe("completed");
  }, 90_000);
});

describe("a cancel whose signal no worker read, during the run's last model call", () => {
  it("ends the run `cancelled` with its last answer kept; the session stays cancelled", async () => {
    const agent = { model: { provider: "scripted" as const, steps: [{ text: "done" }] } };
    const { id } = await client.createSession({ agent });
    const call = holdModelCall(id);
    const { runId } = await client.send(id, "go");
    await call.reached;
    expect(await cancelUnheard(fleet.database, id)).toEqual([runId]);
    // The cancel came while the last model call was still out (its answer not appended).
    expect(await messagesOf(id, "assistant")).toHaveLength(0);
    call.release();
    expect((await client.waitForRun(runId, { timeoutMs: 30_000 })).endedReason).toBe("cancelled");
    expect((await messagesOf(id, "assistant")).map((m) => m.content)).toEqual(["done"]);
    const session = await client.getSession(id);
    expect([session.status, session.runs.length]).toEqual(["cancelled", 1]);
    const events = await eventsOnceEnded(fleet, id, runId);
    expect(events.filter((e) => e.type === "RUN_COMPLETED")).toMatchObject([{ runId, outcome: "cancelled" }]);
  }, 90_000);
});

describe("a cancel whose signal no worker read, during a last model call that fails", () => {
  it("ends the run `cancelled` (event, metric), not with the failure, and parks nothing", async () => {
    // A refusal the provider would repeat (401), on an agent with no fallback: alone, the run
    // ends provider_error and parks the session provider_rejected. Its end appends nothing
    // (endRun): the cancel that came while the call was out must be read there too.
    const agent = { model: { provider: "scripted" as const, steps: [{ fault: "rejected" as const }] } };
    const { id } = await client.createSession({ agent });
    const runs = async (outcome: string) =>
      (await worker.metrics.runs.get()).values.find(
        (v) => v.labels.kind === "run" && v.labels.outcome === outcome,
      )?.value ?? 0;
    const before = { cancelled: await runs("cancelled"), failed: await runs("provider_error") };
    const call = holdModelCall(id);
    const { runId } = await client.send(id, "go");
    await call.reached;
    expect(await cancelUnheard(fleet.database, id)).toEqual([runId]);
    call.release();
    expect(await client.waitForRun(runId, { timeoutMs: 30_000 })).toMatchObject({ endedReason: "cancelled" });
    const events = await eventsOnceEnded(fleet, id, runId);
    expect(events.filter((e) => e.type === "RUN_COMPLETED")).toMatchObject([{ runId, outcome: "cancelled" }]);
    expect(events.filter((e) => e.type === "SESSION_PARKED")).toEqual([]);
    expect([await runs("cancelled"), await runs("provider_error")]).toEqual([
      before.cancelled + 1,
      before.failed,
    ]);
    const session = await client.getSession(id);
    expect([session.status, session.parkedReason ?? null]).toEqual(["cancelled", null]);
  }, 90_000);
});

describe("what an append of a run the last cancel found running answers (real Postgres)", () => {
  const cursor0 = { lastSeq: 0, lastStepSeq: null };
  const user = (content: string) => ({ role: "user" as const, content });

  /** A new session, claimed, re-opened after a cancel that found `r1` running. */
  async function reopened(writes: FencedWrites): Promise<Fence> {
    const queries = new SessionQueries(fleet.database);
    const agent = parseAgentConfig({ model: { provider: "scripted", steps: [{ text: "hi" }] } });
    const { id } = await queries.createSession({ agent });
    const claim = await writes.claimSession(id, `w-${randomUUID().slice(0, 4)}`);
    await fleet.database.sql`update sessions set cancelled_runs = '{r1}', status = 'active' where id = ${id}`;
    return { sessionId: id, epoch: claim!.epoch };
  }

  it("cancelled, grouped or alone, and from the cancel check; another run's append is not", async () => {
    for (const groupWrites of [true, false]) {
      const writes = new FencedWrites(fleet.database, { groupWrites });
      const [a, b] = [await reopened(writes), await reopened(writes)];
      const [onR1, onR2] = await Promise.all([
        writes.appendStep(a, cursor0, "r1", [user("a")], "awaiting_model"),
        writes.appendStep(b, cursor0, "r2", [user("b")], "awaiting_model"),
      ]);
      expect([groupWrites, onR1.cancelled, onR2.cancelled]).toEqual([groupWrites, true, false]);
      expect([await writes.sessionCancelled(a, "r1"), await writes.sessionCancelled(a, "r2")]).toEqual([
        true,
        false,
      ]);
      const read = async (fence: Fence, runId: string) =>
        (await writes.findCommitted(fence, cursor0, runId, [user(fence === a ? "a" : "b")]))?.cancelled;
      expect([await read(a, "r1"), await read(b, "r2")]).toEqual([true, false]);
    }
  });
});
