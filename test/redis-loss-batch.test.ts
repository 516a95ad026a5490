/**
 * Redis lost under a running fleet with a batch mid-flight, as an operator of a managed cache
 * without persistence meets it: (a) restarted empty at once, (b) emptied under connections
 * that stay up (FLUSHALL: a failover behind a proxy), (c) stopped for 20 s and started again
 * empty. Every BullMQ job, queued or running, every lease, lock, event stream and slot is
 * gone. Redis is a server of this test's own (private-redis.ts). Two worker children (3 runs
 * each, so most of the 12 sessions wait in the queue), a sweeper child, the API in this
 * process; a client follows one run with `fleet.stream()` and the batch with
 * `fleet.batchEvents()` across the loss. Checked: the batch ends with every session completed
 * (or parked with a reason), seq contiguous, no tool result stored twice, no tool run twice,
 * its counts and results whole; the client's run stream ends with its RUN_COMPLETED and its
 * batch stream with BATCH_COMPLETED (client-streams-redis-loss.test.ts: they rejected with a
 * 410 before); the processes stay up and do not spin; the sweeper says Redis lost its data;
 * while Redis is away the API's event streams answer 503 `unavailable`, and /healthz 503.
 */
import type { ChildProcess } from "node:child_process";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RunningApi } from "../src/producer/api-server.js";
import type { FleetClient, FleetEvent } from "../src/producer/client.js";
import { createFleetEnv, type FleetEnv, type WorkerProcess, waitFor } from "./support/fleet-env.js";
import { midFlightAgent, pastBefore, untilSessionsEnd } from "./support/mid-flight-agent.js";
import { freePort, startRedis, stopRedis } from "./support/private-redis.js";
import { cpuSeconds } from "./support/process-cpu.js";

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));
const COUNT = 12;

describe("Redis lost under a fleet with a batch mid-flight", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let api: RunningApi;
  let redis: ChildProcess;
  let port: number;
  let workers: WorkerProcess[];
  let sweeper: WorkerProcess;

  beforeAll(async () => {
    port = await freePort();
    redis = await startRedis(port);
    fleet = await createFleetEnv("redislossbatch", { redisUrl: `redis://127.0.0.1:${port}` });
    ({ api, client } = await fleet.startApi());
    workers = await Promise.all([0, 1].map(() => fleet.spawnWorker({ WORKER_CONCURRENCY: "3" })));
    sweeper = await fleet.spawnSweeper();
  }, 90_000);
  afterAll(async () => {
    await fleet?.close();
    if (redis) await stopRedis(redis);
  });

  /** Reads `events` to its end, or says how far it got when it rejects. */
  async function readAll(events: AsyncGenerator<FleetEvent>): Promise<FleetEvent[] | string> {
    const seen: FleetEvent[] = [];
    try {
      for await (const event of events) seen.push(event);
      return seen;
    } catch (error) {
      return `${error} after ${seen.map((e) => e.type).join(", ")}`;
    }
  }

  async function ride(tag: string, outage: (sessionId: string) => Promise<void>) {
    const { sql } = fleet.database;
    const created = await client.createBatch(
      Array.from({ length: COUNT }, (_, i) => ({
        agent: midFlightAgent(tag, i),
        input: `go ${i}`,
        customId: `${i}`,
      })),
    );
    const ids = created.sessions.map((s) => s.id);
    await waitFor(async () => (await pastBefore(sql, ids)) >= 6, 30_000, "six sessions past `before`");
    const batchEvents = readAll(client.batchEvents(created.id));
    const single = await client.createSession({ agent: midFlightAgent(`${tag}-single`, 0) });
    const runEvents = readAll(client.stream(single.id, "go"));
    await waitFor(
      async () => (await pastBefore(sql, [single.id])) === 1,
      30_000,
      "the streamed run past `before`",
    );
    await pause(300);
    const pids = [...workers, sweeper].map((w) => w.child.pid!);
    const cpuBefore = await Promise.all(pids.map(cpuSeconds));
    const lossesBefore = lossesSaid();
    const started = Date.now();
    await outage(ids[0]!);
    const outageSeconds = (Date.now() - started) / 1000;
    const cpu = (await Promise.all(pids.map(cpuSeconds))).map((s, i) => s - cpuBefore[i]!);
    for (const seconds of cpu) expect(seconds).toBeLessThan(Math.max(1, outageSeconds / 4));

    await waitFor(
      async () => (await client.getBatch(created.id).catch(() => null))?.status === "ended",
      60_000,
      "the batch ended",
    );
    // The streamed session waits behind the batch's in the queue and can end after the batch:
    // its messages are read once it has ended too (a tool's file written but its result not
    // yet stored is a step in flight, not a lost result).
    await untilSessionsEnd(sql, [single.id], { orParked: true, timeoutMs: 60_000 });
    const batch = await client.getBatch(created.id);
    expect(batch.counts.completed + batch.counts.parked).toBe(COUNT);
    const results = [];
    for await (const result of client.batchResults(created.id)) results.push(result);
    expect(results.map((r) => r.customId).sort()).toEqual(ids.map((_, i) => `${i}`).sort());
    for (const result of results)
      if (result.status === "parked") expect(result.parkedReason).toBeTruthy();
      else expect(result).toMatchObject({ status: "completed", output: "done" });
    for (const [i, id] of [...ids, single.id].entries()) {
      const { messages } = await client.getSession(id);
      expect(messages.map((m) => m.seq)).toEqual(messages.map((_, n) => n + 1));
      const answered = messages.flatMap((m) => (m.role === "tool" ? [m.toolCallId] : []));
      expect(new Set(answered).size).toBe(answered.length);
      const prefix = id === single.id ? `${tag}-single-0` : `${tag}-${i}`;
      for (const file of ["before", "after"]) {
        const ran = await readFile(join(fleet.config.toolDir, `${prefix}-${file}.txt`), "utf8").catch(
          () => "",
        );
        expect(ran, `${prefix}-${file}`).toBe(answered.includes(file) ? "ran\n" : "");
      }
    }

    const batchRead = await batchEvents;
    expect(typeof batchRead === "string" ? batchRead : batchRead.map((e) => e.type)).toEqual([
      ...Array.from({ length: COUNT }, () => "SESSION_ENDED"),
      "BATCH_COMPLETED",
    ]);
    const runRead = await runEvents;
    expect(typeof runRead === "string" ? runRead : runRead.at(-1)?.type).toBe("RUN_COMPLETED");
    if (typeof runRead !== "string") {
      const seqs = runRead.flatMap((e) =>
        e.type === "MESSAGE" ? [(e.data.message as { seq: number }).seq] : [],
      );
      expect(seqs).toEqual(seqs.map((_, n) => n + 1));
    }
    for (const process of [...workers, sweeper]) expect(process.child.exitCode).toBeNull();
    expect(lossesSaid()).toBeGreaterThan(lossesBefore);
    expect((await fetch(`${api.url}/healthz`)).status).toBe(200);
  }

  const lossesSaid = () => sweeper.output().split("Redis lost its data").length - 1;

  it("(a) restarted empty at once", async () => {
    await ride("restarted", async () => {
      await stopRedis(redis);
      redis = await startRedis(port);
    });
  }, 90_000);

  it("(b) emptied under connections that stay up (FLUSHALL)", async () => {
    await ride("flushed", async () => {
      expect(await fleet.redis.flushall()).toBe("OK");
    });
  }, 90_000);

  it("(c) stopped for 20 s, then started empty: the API says 503 meanwhile", async () => {
    await ride("stopped", async (sessionId) => {
      await stopRedis(redis);
      const stoppedAt = Date.now();
      const answers = [];
      for (const path of [`/v1/sessions/${sessionId}/events`, "/healthz"]) {
        const response = await fetch(`${api.url}${path}`, { headers: { accept: "text/event-stream" } });
        answers.push(`${path} ${response.status} ${await response.text()}`);
      }
      expect(answers[0]).toMatch(/ 503 \{"error":\{"code":"unavailable","message":"[^"]*"\}\}$/);
      expect(answers[1]).toMatch(/ 503 /);
      await pause(20_000 - (Date.now() - stoppedAt));
      redis = await startRedis(port);
    });
  }, 90_000);
});
