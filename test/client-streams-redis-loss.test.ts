/**
 * The client's run and batch streams across a Redis that restarts empty (a managed cache's
 * failover without persistence) while they are open. The fleet rides it out: the run goes on
 * and completes, the batch ends. The streams' own reconnect, with the last id they had, is
 * answered `410 expired` (the stream was rebuilt from Postgres under new ids), and before,
 * `fleet.stream()` and `fleet.batchEvents()` rejected with it — "reconnect without an id",
 * which their caller had never given — instead of yielding up to the run's `RUN_COMPLETED` and
 * the batch's `BATCH_COMPLETED` as they promise (contracts §7). Each now reads the rebuilt
 * stream again from its start, leaving out what it had yielded: every stored message once, in
 * `seq` order, and each session's end once. (The step itself, with no services:
 * test/stream-reread-unit.test.ts.)
 */
import type { ChildProcess } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetApiError, type FleetClient, type FleetEvent } from "../src/producer/client.js";
import type { RunningSweeper } from "../src/sweeper/sweeper-process.js";
import { type FleetEnv, waitFor } from "./support/fleet-env.js";
import { startRedis, stopRedis } from "./support/private-redis.js";
import { startPrivateRedisFleet } from "./support/private-redis-fleet.js";

const napping = (ms: number, first: { text: string }[] = []) => ({
  model: {
    provider: "scripted" as const,
    steps: [
      ...first,
      { toolCalls: [{ id: "nap", name: "sleep", arguments: { ms } }] },
      { toolCalls: [{ id: "nap2", name: "sleep", arguments: { ms: 200 } }] },
      { text: "done" },
    ],
  },
  tools: ["sleep"],
});

describe("the client's run and batch streams when Redis restarts empty under them", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let sweeper: RunningSweeper;
  let redis: ChildProcess;
  let port: number;

  beforeAll(async () => {
    ({ port, redis, fleet, client, sweeper } = await startPrivateRedisFleet("clientstreamsloss"));
    await fleet.spawnWorker();
  }, 90_000);
  afterAll(async () => {
    await sweeper?.stop();
    await fleet?.close();
    if (redis) await stopRedis(redis);
  });

  /**
   * Redis restarted empty under a reader whose `onRetry` fills `retries`, past the API's grace
   * for a run's end (the stream written anew gets it from Postgres); returns once the reader
   * was told the 410 and its re-read had `settleMs` to connect and read what the stream holds.
   */
  const restartUnderReader = async (retries: unknown[], settleMs: number) => {
    await new Promise((resolve) => setTimeout(resolve, 6_000));
    await restartEmpty();
    await waitFor(
      async () => retries.some((r) => r instanceof FleetApiError && r.status === 410),
      30_000,
      "the reader's 410",
    );
    await new Promise((resolve) => setTimeout(resolve, settleMs));
  };
  /** `events` hold every message of the session's run from its message "second" on, once each, in order. */
  const expectSecondRunOnce = async (id: string, events: FleetEvent[]) => {
    const { messages } = await client.getSession(id);
    const secondRun = messages.slice(messages.findIndex((m) => m.content === "second"));
    const seqs = events.flatMap((e) =>
      e.type === "MESSAGE" ? [(e.data.message as { seq: number }).seq] : [],
    );
    expect(seqs).toEqual(secondRun.map((m) => m.seq));
  };

  const restartEmpty = async () => {
    await stopRedis(redis);
    redis = await startRedis(port);
  };

  it("fleet.stream() yields up to its run's RUN_COMPLETED, every stored message once", async () => {
    const { id } = await client.createSession({ agent: napping(3_000, [{ text: "first done" }]) });
    // A run before, so that the rebuilt stream holds messages of another run too.
    await client.waitForRun((await client.send(id, "first")).runId, { timeoutMs: 30_000 });
    const events: FleetEvent[] = [];
    let restarted: Promise<void> | undefined;
    for await (const event of client.stream(id, "second")) {
      events.push(event);
      // Inside the 3 s nap: the stream is open, at its place, when Redis goes.
      if (event.type === "TOOL_STARTED" && !restarted) restarted = restartEmpty();
    }
    await restarted;
    const runId = events[0]!.data.runId;
    expect(events[0]!.type).toBe("RUN_STARTED");
    expect(events.at(-1)).toMatchObject({ type: "RUN_COMPLETED", data: { runId, outcome: "completed" } });
    expect(events.every((e) => e.data.runId === runId)).toBe(true);
    await expectSecondRunOnce(id, events);
    const tools = events.flatMap((e) => (e.type === "TOOL_STARTED" ? [e.data.toolCallId] : []));
    expect(new Set(tools).size).toBe(tools.length);
  }, 60_000);

  it("fleet.batchEvents() ends with BATCH_COMPLETED, each session's end once", async () => {
    const batch = await client.createBatch([
      { agent: napping(0), input: "quick", customId: "quick" },
      { agent: napping(3_000), input: "slow", customId: "slow-1" },
      { agent: napping(3_000), input: "slow", customId: "slow-2" },
    ]);
    const events: FleetEvent[] = [];
    let restarted: Promise<void> | undefined;
    for await (const event of client.batchEvents(batch.id)) {
      events.push(event);
      if (event.type === "SESSION_ENDED" && !restarted) restarted = restartEmpty();
    }
    await restarted;
    expect(events.at(-1)).toMatchObject({
      type: "BATCH_COMPLETED",
      data: { counts: { total: 3, completed: 3 } },
    });
    const ended = events.flatMap((e) => (e.type === "SESSION_ENDED" ? [e.data.customId] : []));
    expect(ended.sort()).toEqual(["quick", "slow-1", "slow-2"]);
  }, 60_000);

  it("fleet.events() (no `after`) follows the session on to its run's end, every stored message once", async () => {
    const { id } = await client.createSession({ agent: napping(3_000, [{ text: "first done" }]) });
    await client.waitForRun((await client.send(id, "first")).runId, { timeoutMs: 30_000 });
    const { runId } = await client.send(id, "second");
    const events: FleetEvent[] = [];
    const retries: unknown[] = [];
    let restarted: Promise<void> | undefined;
    const controller = new AbortController();
    for await (const event of client.events(id, {
      signal: controller.signal,
      onRetry: (reason) => retries.push(reason),
    })) {
      events.push(event);
      if (event.type === "TOOL_STARTED" && !restarted) restarted = restartEmpty();
      if (event.type === "RUN_COMPLETED" && event.data.runId === runId) break;
    }
    await restarted;
    expect(events.at(-1)).toMatchObject({ type: "RUN_COMPLETED", data: { runId, outcome: "completed" } });
    await expectSecondRunOnce(id, events);
    const tools = events.flatMap((e) => (e.type === "TOOL_STARTED" ? [e.data.toolCallId] : []));
    expect(tools).toEqual(["nap", "nap2"]);
    expect(events.filter((e) => e.type === "RUN_STARTED")).toHaveLength(1);
    // The caller is told why it read again, as of any other reconnect after a failure.
    expect(retries.some((r) => r instanceof FleetApiError && r.status === 410)).toBe(true);
  }, 60_000);

  it("fleet.events() (no `after`) yields an ended run's RUN_COMPLETED once, also when the stream written anew has it again", async () => {
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "first done" }, { text: "second done" }] } },
    });
    const first = (await client.send(id, "first")).runId;
    const events: FleetEvent[] = [];
    const retries: unknown[] = [];
    const controller = new AbortController();
    let second: string | undefined;
    const following = (async () => {
      for await (const event of client.events(id, {
        signal: controller.signal,
        onRetry: (reason) => retries.push(reason),
      })) {
        events.push(event);
        if (event.type === "RUN_COMPLETED" && event.data.runId === second) break;
      }
    })();
    await waitFor(async () => events.some((e) => e.type === "RUN_COMPLETED"), 30_000, "the first run's end");
    await restartUnderReader(retries, 2_000);
    second = (await client.send(id, "second")).runId;
    await Promise.race([following, new Promise((resolve) => setTimeout(resolve, 30_000))]);
    controller.abort();
    const ends = events.flatMap((e) => (e.type === "RUN_COMPLETED" ? [e.data.runId] : []));
    expect(ends).toEqual([first, second]);
  }, 90_000);

  it("fleet.events() (no `after`) yields a parking once, also when the stream written anew announces it again", async () => {
    const { id } = await client.createSession({
      agent: {
        model: {
          provider: "scripted",
          steps: [{ toolCalls: [{ id: "a", name: "sleep", arguments: { ms: 10 } }] }, { text: "never" }],
        },
        tools: ["sleep"],
        maxTurns: 1,
      },
    });
    await client.send(id, "go");
    const events: FleetEvent[] = [];
    const retries: unknown[] = [];
    const controller = new AbortController();
    const following = (async () => {
      for await (const event of client.events(id, {
        signal: controller.signal,
        onRetry: (reason) => retries.push(reason),
      }))
        events.push(event);
    })();
    await waitFor(async () => events.some((e) => e.type === "SESSION_PARKED"), 30_000, "the parking");
    await restartUnderReader(retries, 3_000);
    controller.abort();
    await following;
    expect(events.filter((e) => e.type === "RUN_COMPLETED")).toHaveLength(1);
    expect(events.filter((e) => e.type === "SESSION_PARKED")).toHaveLength(1);
  }, 90_000);

  it("fleet.events() (no `after`) follows on when the run's stream was written anew before its re-read connected", async () => {
    const { id } = await client.createSession({ agent: napping(3_000, [{ text: "first done" }]) });
    await client.waitForRun((await client.send(id, "first")).runId, { timeoutMs: 30_000 });
    const { runId } = await client.send(id, "second");
    const events: FleetEvent[] = [];
    const read = (async () => {
      for await (const event of client.events(id, { signal: AbortSignal.timeout(40_000) })) {
        events.push(event);
        if (event.type === "TOOL_STARTED" && event.data.toolCallId === "nap") {
          await restartEmpty();
          // A reader busy with the event meanwhile: the worker writes the run's next messages,
          // and its end, into the new stream (no RUN_STARTED in it) before the reader reconnects.
          await client.waitForRun(runId, { timeoutMs: 30_000 });
        }
        if (event.type === "RUN_COMPLETED" && event.data.runId === runId) return;
      }
    })();
    await read;
    expect(events.at(-1)).toMatchObject({ type: "RUN_COMPLETED", data: { runId, outcome: "completed" } });
    await expectSecondRunOnce(id, events);
  }, 90_000);
});
