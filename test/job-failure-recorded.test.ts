/**
 * A run whose job fails on a fault the run's loop does not turn into an outcome — a bug in a
 * tool's wrapper (here a user tool object whose `timeoutMs` getter throws), an
 * extension that throws outside its hook, a TypeError in the worker's own code — stays
 * `running` when its job fails; the next claim of the session (BullMQ's retry) ends it
 * `crashed` and a resume goes on. The run's `error` said nothing: the message was only in the
 * worker's "job failed" log line. Now the worker, while it still holds the session, writes the
 * message (clipped, its secrets scrubbed, no stack) on the run in a fenced statement; what the
 * run ends as, its RUN_COMPLETED, the count and the resume are as before. Real API, worker (in
 * this process), Postgres and Redis.
 */
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { eventStreamKey } from "../src/shared/events.js";
import { MAX_ERROR_CHARS } from "../src/shared/failure-text.js";
import { FencedWrites } from "../src/shared/store/fenced-writes.js";
import { defineTool } from "../src/worker/tools/registry.js";
import { type RunningWorker, startWorker } from "../src/worker/worker.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { runsCounted } from "./support/metric-samples.js";

const SECRET = "team-secret-value-0123456789";
const ENV_NAME = "JOB_FAILURE_TEST_API_KEY";

let fleet: FleetEnv;
let client: FleetClient;
let worker: RunningWorker;
/** The worker's log lines, parsed. */
const lines: Record<string, unknown>[] = [];
const logger = pino({ level: "warn" }, { write: (line: string) => void lines.push(JSON.parse(line)) });

/**
 * The fault each next tool call meets, thrown from inside the worker's own handling of the call
 * (here: the tool object's `timeoutMs`, read as the call starts, is a getter with a bug). Each
 * test queues one before it sends; with none queued the getter answers as a plain tool.
 */
const faults: Array<() => never> = [];
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
    const fault = faults.shift();
    return fault ? fault() : undefined;
  },
});
const secretFault = (): never => {
  throw new Error(`lookup failed with key ${SECRET}`);
};
const typeFault = (): never => {
  const key = undefined as unknown as { trim(): string };
  return key.trim() as never;
};
const longFault = (): never => {
  throw new Error(`upstream answered ${"x".repeat(3 * MAX_ERROR_CHARS)} with Bearer ${SECRET}`);
};

beforeAll(async () => {
  process.env[ENV_NAME] = SECRET;
  fleet = await createFleetEnv("job-failure-recorded");
  ({ client } = await fleet.startApi());
  worker = await startWorker(
    { ...fleet.config, logLevel: "silent" },
    { serveMetrics: false, tools: [lookup], logger },
  );
}, 60_000);
afterAll(async () => {
  await worker?.stop();
  await fleet?.close();
  delete process.env[ENV_NAME];
});

async function crashedOnce(fault: () => never) {
  faults.push(fault);
  const agent = {
    model: {
      provider: "scripted" as const,
      steps: [{ toolCalls: [{ name: "lookup", arguments: { key: "k" } }] }, { text: "resumed" }],
    },
    tools: ["lookup"],
  };
  const session = await client.createSession({ agent });
  const { runId } = await client.send(session.id, "go");
  // The failed job's retry claims the session: the run ends `crashed`, a resume completes.
  await waitFor(
    async () => (await client.getSession(session.id)).runs.some((r) => r.endedReason === "completed"),
    60_000,
    "the resume after the crash to complete",
  );
  const { runs } = await client.getSession(session.id);
  const crashed = runs.find((r) => r.id === runId)!;
  return { sessionId: session.id, runId, runs, crashed };
}

describe("a run whose job failed on an unexpected error", () => {
  it("has the error's message on the run it ended `crashed`, scrubbed; the rest as before", async () => {
    const before = await runsCounted(worker.metrics.registry);
    const { sessionId, runId, runs, crashed } = await crashedOnce(secretFault);
    expect(crashed.endedReason).toBe("crashed");
    // Before: null.
    expect(crashed.error).toBe("lookup failed with key [redacted]");
    const [stored] = await fleet.database.sql<{ error: string | null; ended_reason: string }[]>`
      select error, ended_reason from runs where id = ${runId}`;
    expect(stored).toEqual({ error: "lookup failed with key [redacted]", ended_reason: "crashed" });
    // The resume that followed, as before: one, automatic, and it completed.
    expect(runs.map((r) => [r.kind, r.endedReason, r.error])).toEqual([
      ["run", "crashed", "lookup failed with key [redacted]"],
      ["resume", "completed", null],
    ]);
    // Its end event says `crashed` once, and nothing else of it; the count is one crashed run.
    const entries = await fleet.redis.xrange(eventStreamKey(fleet.config.prefix, sessionId), "-", "+");
    const ends = entries
      .map(([, fields]) => JSON.parse(fields[fields.indexOf("data") + 1]!) as Record<string, unknown>)
      .filter((event) => event.type === "RUN_COMPLETED" && event.runId === runId);
    expect(ends).toHaveLength(1);
    expect(ends[0]!.outcome).toBe("crashed");
    expect(Object.keys(ends[0]!)).not.toContain("error");
    const after = await runsCounted(worker.metrics.registry);
    expect((after["run|crashed"] ?? 0) - (before["run|crashed"] ?? 0)).toBe(1);
    expect((after["resume|completed"] ?? 0) - (before["resume|completed"] ?? 0)).toBe(1);
  }, 90_000);

  it("a TypeError's message, and a long message clipped with its secret scrubbed", async () => {
    const typeError = await crashedOnce(typeFault);
    expect(typeError.crashed.endedReason).toBe("crashed");
    expect(typeError.crashed.error).toMatch(/^Cannot read properties of undefined \(reading 'trim'\)$/);
    const long = await crashedOnce(longFault);
    expect(long.crashed.endedReason).toBe("crashed");
    const error = long.crashed.error!;
    expect(error).toMatch(/^upstream answered x+… \(\d+ characters in all\)$/);
    expect(error.length).toBeLessThan(MAX_ERROR_CHARS + 40);
    expect(error).not.toContain(SECRET);
    expect(error).not.toMatch(/\n\s+at /);
    // The worker's "job failed" line says the same, not the whole message with its key (before:
    // 6,000-odd characters ending in the key).
    const failed = lines.filter((l) => l.msg === "job failed").map((l) => String(l.err));
    expect(failed.length).toBeGreaterThanOrEqual(3);
    for (const text of failed) {
      expect(text).not.toContain(SECRET);
      expect(text.length).toBeLessThan(MAX_ERROR_CHARS + 40);
    }
    expect(failed).toContain(error);
  }, 120_000);

  it("its write changes nothing on an ended run, nor once the session's epoch moved", async () => {
    const { sql } = fleet.database;
    const writes = new FencedWrites(fleet.database);
    const { sessionId, runId } = await crashedOnce(longFault);
    // The resume's own job may still come after the resume completed (the claim that found the
    // crash ran it at once) and claim the session, moving its epoch: no worker claims from here.
    await worker.stop();
    const [session] = await sql<{ epoch: string }[]>`
      select lease_epoch as epoch from sessions where id = ${sessionId}`;
    const fence = { sessionId, epoch: Number(session!.epoch) };
    const [before] = await sql<{ error: string }[]>`select error from runs where id = ${runId}`;
    // Ended (crashed): left as it is, under the session's current epoch too.
    expect(await writes.recordRunFailure(fence, runId, "late")).toBe(false);
    // A run left running (as a failed job leaves it), under an epoch that is no longer the session's.
    await sql`update runs set status = 'running', ended_at = null, ended_reason = null where id = ${runId}`;
    expect(await writes.recordRunFailure({ sessionId, epoch: fence.epoch - 1 }, runId, "stale")).toBe(false);
    expect(await writes.recordRunFailure({ sessionId: "other", epoch: fence.epoch }, runId, "other")).toBe(
      false,
    );
    const [after] = await sql<{ error: string }[]>`select error from runs where id = ${runId}`;
    expect(after!.error).toBe(before!.error);
    // Under its own epoch it is written, a NUL kept out as the other writes keep it out.
    expect(await writes.recordRunFailure(fence, runId, "mine\u0000")).toBe(true);
    const [mine] = await sql<{ error: string }[]>`select error from runs where id = ${runId}`;
    expect(mine!.error).toBe("mine\uFFFD");
    await sql`update runs set status = 'ended', ended_at = now(), ended_reason = 'crashed' where id = ${runId}`;
  }, 120_000);
});
