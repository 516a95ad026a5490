/**
 * Invariant 3, "a worker that lost its lease cannot append and starts no tool", end to end:
 * - store: the sweeper's endAbandonedRun advances the fencing epoch in the statement that
 *   ends the run, so the declared-dead holder's next append is refused at once;
 * - real processes: a worker frozen (SIGSTOP) inside a tool is declared `stalled`; woken
 *   (SIGCONT), it appends nothing and starts no further tool, whether or not another
 *   worker has claimed the session meanwhile, and counts the refused write.
 */
import { access } from "node:fs/promises";
import { join } from "node:path";
import type { Queue } from "bullmq";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { parseAgentConfig } from "../src/shared/agent-config.js";
import { loadConfig } from "../src/shared/config.js";
import { FencedError } from "../src/shared/errors.js";
import type { Message } from "../src/shared/messages.js";
import { RunQueues } from "../src/shared/queues.js";
import { FencedWrites } from "../src/shared/store/fenced-writes.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { SweepQueries } from "../src/sweeper/sweep-queries.js";
import { type RunningSweeper, startSweeper } from "../src/sweeper/sweeper-process.js";
import {
  createFleetEnv,
  type FleetEnv,
  readyInfo,
  seqsOf,
  type WorkerProcess,
  waitFor,
} from "./support/fleet-env.js";
import { INTERRUPTED_TEXT } from "./support/sleepy-sessions.js";

const AGENT = parseAgentConfig({ model: { provider: "scripted", steps: [{ text: "hi" }] } });
const user = (content: string): Message => ({ role: "user", content });

describe("endAbandonedRun fences the holder it declares dead", () => {
  let fleet: FleetEnv;
  let queries: SessionQueries;
  let writes: FencedWrites;
  let sweeps: SweepQueries;

  beforeAll(async () => {
    fleet = await createFleetEnv("leasefencestore");
    queries = new SessionQueries(fleet.database);
    writes = new FencedWrites(fleet.database);
    sweeps = new SweepQueries(fleet.database);
  });
  afterAll(async () => fleet?.close());

  async function epochOf(id: string): Promise<number> {
    const [row] = await fleet.database.sql<
      { e: string }[]
    >`select lease_epoch as e from sessions where id = ${id}`;
    return Number(row!.e);
  }

  /** A session with one run started by worker `w1`; returns its fence and run id. */
  async function runningSession() {
    const { id } = await queries.createSession({ agent: AGENT });
    const { run } = await queries.createRun({ sessionId: id, kind: "run", trigger: "api", input: "go" });
    const epoch = (await writes.claimSession(id, "w1"))!.epoch;
    const fence = { sessionId: id, epoch };
    await writes.startRun(
      fence,
      { lastSeq: 0, lastStepSeq: null },
      { id: run.id, workerId: "w1", resumeKind: null },
      [user("go")],
      "awaiting_model",
    );
    return { id, fence, runId: run.id };
  }

  it("advances the epoch with the run it ends: the old holder's append is refused", async () => {
    const { id, fence, runId } = await runningSession();
    expect(await sweeps.endAbandonedRun(runId, "stalled")).toBe("stalled");
    expect(await epochOf(id)).toBe(fence.epoch + 1);
    expect(await queries.getRun(runId)).toMatchObject({ status: "ended", endedReason: "stalled" });
    await expect(
      writes.append(fence, { lastSeq: 1, lastStepSeq: null }, runId, [user("late")], "awaiting_model"),
    ).rejects.toBeInstanceOf(FencedError);
    await expect(writes.endRun(fence, runId, "completed")).rejects.toBeInstanceOf(FencedError);
    const [n] = await fleet.database.sql<{ n: number }[]>`
      select count(*)::int as n from messages where session_id = ${id}`;
    expect(n!.n).toBe(1);
  });

  it("changes nothing, epoch included, when the run is not running", async () => {
    const { id, fence, runId } = await runningSession();
    await writes.endRun(fence, runId, "completed");
    expect(await sweeps.endAbandonedRun(runId, "crashed")).toBeNull();
    expect(await epochOf(id)).toBe(fence.epoch);
    const { run: queued } = await queries.createRun({
      sessionId: id,
      kind: "run",
      trigger: "api",
      input: "x",
    });
    expect(await sweeps.endAbandonedRun(queued.id, "stalled")).toBeNull();
    expect(await epochOf(id)).toBe(fence.epoch);
    expect(await queries.getRun(queued.id)).toMatchObject({ status: "queued" });
  });

  it("races a new holder's claim without deadlock: the epoch moves once per winner", async () => {
    for (let i = 0; i < 20; i++) {
      const { id, fence, runId } = await runningSession();
      const [claim, ended] = await Promise.all([
        writes.claimSession(id, "w2"),
        sweeps.endAbandonedRun(runId, "stalled"),
      ]);
      const run = await queries.getRun(runId);
      expect(run).toMatchObject({ status: "ended", endedReason: ended ? "stalled" : "crashed" });
      expect(await epochOf(id)).toBe(fence.epoch + (ended ? 2 : 1));
      // Either order serialises on the session row; the claimant's epoch is the current one.
      expect(claim!.epoch).toBe(await epochOf(id));
    }
  });
});

/** A session whose first step sleeps `napMs` (call `nap`) and then appends to `file` (call `log`). */
async function napThenLog(client: FleetClient, file: string, napMs: number): Promise<string> {
  const { id } = await client.createSession({
    agent: {
      model: {
        provider: "scripted",
        steps: [
          {
            toolCalls: [
              { id: "nap", name: "sleep", arguments: { ms: napMs } },
              { id: "log", name: "append_file", arguments: { path: file, line: "ran" } },
            ],
          },
          { text: "done" },
        ],
      },
      tools: ["append_file", "sleep"],
    },
  });
  await client.send(id, "go");
  return id;
}

async function fencedWrites(port: number): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith("fleet_fenced_writes_total"));
  return line ? Number(line.split(" ").at(-1)) : 0;
}

/** When (ms since the epoch) and why the worker logged that it was fenced out (its JSON log). */
function fencedLog(worker: WorkerProcess): { time: number; reason: string } {
  for (const line of worker.output().split("\n")) {
    if (!line.includes("fenced out")) continue;
    try {
      return JSON.parse(line) as { time: number; reason: string };
    } catch {}
  }
  throw new Error(`no "fenced out" line in the worker's output:\n${worker.output()}`);
}

/** The guard refused (before any statement was sent), not only the epoch in Postgres. */
const GUARD_REFUSED = /lease cannot be proven|lease renewal was refused/;

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("a frozen worker declared stalled, woken again", () => {
  let fleet: FleetEnv;
  let sweeper: RunningSweeper;
  let queues: RunQueues;
  let queue: Queue;
  let client: FleetClient;

  beforeAll(async () => {
    fleet = await createFleetEnv("leasefence");
    ({ client } = await fleet.startApi());
    sweeper = await startSweeper({ ...loadConfig(fleet.env), logLevel: "silent" }, { serveMetrics: false });
    queues = new RunQueues(fleet.redis, fleet.config.prefix);
    queue = queues.resumes; // the resume waits while the frozen worker wakes
  });
  afterAll(async () => {
    await queues?.close();
    await sweeper?.stop();
    await fleet?.close();
  });

  const sql = () => fleet.database.sql;
  async function session(id: string) {
    const [row] = await sql()<{ last_seq: number; lease_epoch: string }[]>`
      select last_seq, lease_epoch from sessions where id = ${id}`;
    return { lastSeq: row!.last_seq, epoch: Number(row!.lease_epoch) };
  }
  async function runs(id: string) {
    return sql()<
      { id: string; kind: string; status: string; ended_reason: string | null; worker_id: string }[]
    >`
      select id, kind, status, ended_reason, worker_id from runs where session_id = ${id} order by created_at`;
  }
  const exists = (file: string) =>
    access(join(fleet.config.toolDir, file)).then(
      () => true,
      () => false,
    );

  /** Starts the session on `worker`, freezes the worker inside `nap`, waits for the stall. */
  async function freezeInsideNap(worker: WorkerProcess, file: string) {
    const id = await napThenLog(client, file, 1_500);
    await waitFor(async () => (await session(id)).lastSeq === 2, 15_000, "the tool step appended");
    await pause(150); // inside `nap` now
    const before = await session(id);
    worker.child.kill("SIGSTOP");
    const frozenAt = Date.now();
    await waitFor(
      async () => {
        const [run, resume] = await runs(id);
        return run?.ended_reason === "stalled" && resume?.status === "queued";
      },
      15_000,
      "the sweeper ending the run stalled and queueing its resume",
    );
    const stalledAfter = Date.now() - frozenAt;
    const atStall = await session(id);
    // Declared dead and fenced in one statement, before anyone claimed the session.
    expect(atStall.epoch).toBe(before.epoch + 1);
    expect(atStall.lastSeq).toBe(before.lastSeq);
    return { id, frozenAt, stalledAfter, atStall };
  }

  it("with nobody claiming the session, it appends nothing and starts no tool", async () => {
    const worker = await fleet.spawnWorker();
    const { metricsPort, workerId } = readyInfo(worker);
    const { id, stalledAfter, atStall } = await freezeInsideNap(worker, "alone.txt");
    // The resume the sweeper queued waits: nobody claims the session while the worker wakes.
    await queue.pause();
    expect((await runs(id)).map((r) => [r.kind, r.status])).toEqual([
      ["run", "ended"],
      ["resume", "queued"],
    ]);
    const wokeAt = Date.now();
    worker.child.kill("SIGCONT");
    await waitFor(async () => (await fencedWrites(metricsPort)) >= 1, 10_000, "the refused write counted");
    const stopped = fencedLog(worker);
    expect(stopped.reason).toMatch(GUARD_REFUSED);
    await pause(1_000); // whatever the woken worker was about to do, it has done by now
    expect(await fencedWrites(metricsPort)).toBe(1); // one refusal, then it stopped
    expect(await session(id)).toEqual(atStall); // no append, no claim
    expect(await exists("alone.txt")).toBe(false); // `log` never started
    expect((await runs(id)).map((r) => r.status)).toEqual(["ended", "queued"]);
    console.log(
      `stalled ${stalledAfter} ms after SIGSTOP (lease TTL ${fleet.config.leaseTtlMs} ms); ` +
        `stopped ${stopped.time - wokeAt} ms after SIGCONT, appending nothing (${stopped.reason})`,
    );

    // Let the resume run: the calls are answered as interrupted, never run.
    await queue.resume();
    await waitFor(async () => (await runs(id)).every((r) => r.status === "ended"), 15_000, "the resume");
    const { messages } = await client.getSession(id);
    expect(seqsOf(messages)).toEqual(messages.map((_, i) => i + 1));
    expect(messages.filter((m) => m.role === "tool")).toMatchObject([
      { toolCallId: "nap", success: false, content: INTERRUPTED_TEXT },
      { toolCallId: "log", success: false, content: INTERRUPTED_TEXT },
    ]);
    expect(messages.at(-1)).toMatchObject({ role: "assistant", content: "done" });
    expect(await exists("alone.txt")).toBe(false);
    expect((await runs(id)).map((r) => [r.ended_reason, r.worker_id])).toEqual([
      ["stalled", workerId],
      ["completed", workerId],
    ]);
    worker.child.kill("SIGTERM");
    await worker.exited;
  }, 60_000);

  it("after another worker answered its calls as interrupted, it starts none of them", async () => {
    const worker = await fleet.spawnWorker();
    const { metricsPort, workerId } = readyInfo(worker);
    const { id, frozenAt } = await freezeInsideNap(worker, "rescued.txt");
    const rescuer = await fleet.spawnWorker();
    let wokeAt = 0;
    try {
      await waitFor(async () => (await runs(id)).every((r) => r.status === "ended"), 15_000, "the resume");
    } finally {
      wokeAt = Date.now();
      worker.child.kill("SIGCONT");
    }
    const done = await session(id);
    await waitFor(async () => (await fencedWrites(metricsPort)) >= 1, 10_000, "the refused write counted");
    const stopped = fencedLog(worker);
    expect(stopped.reason).toMatch(GUARD_REFUSED);
    await pause(1_000);
    expect(await fencedWrites(metricsPort)).toBe(1);
    expect(await session(id)).toEqual(done);
    expect(await exists("rescued.txt")).toBe(false);
    const [late] = await sql()<{ n: number }[]>`
      select count(*)::int as n from messages m join runs r on r.id = m.run_id
       where m.session_id = ${id} and r.worker_id = ${workerId} and m.created_at > to_timestamp(${frozenAt / 1000})`;
    expect(late!.n).toBe(0);
    expect((await runs(id)).map((r) => [r.ended_reason, r.worker_id])).toEqual([
      ["stalled", workerId],
      ["completed", readyInfo(rescuer).workerId],
    ]);
    console.log(
      `rescued session: frozen worker stopped ${stopped.time - wokeAt} ms after SIGCONT (${stopped.reason})`,
    );
  }, 60_000);
});
