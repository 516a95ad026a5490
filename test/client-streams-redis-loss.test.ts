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
import { FleetApiError, FleetClient, type FleetEvent } from "../src/producer/client.js";
import type { RunningSweeper } from "../src/sweeper/sweeper-process.js";
import { alwaysGone, sseEvent, startFakeEventsApi } from "./support/fake-events-api.js";
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
    const { messages } = await client.getSession(id);
    const secondRun = messages.slice(messages.findIndex((m) => m.content === "second"));
    const seqs = events.flatMap((e) =>
      e.type === "MESSAGE" ? [(e.data.message as { seq: number }).seq] : [],
    );
    expect(seqs).toEqual(secondRun.map((m) => m.seq));
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
    const { messages } = await client.getSession(id);
    const secondRun = messages.slice(messages.findIndex((m) => m.content === "second"));
    const seqs = events.flatMap((e) =>
      e.type === "MESSAGE" ? [(e.data.message as { seq: number }).seq] : [],
    );
    expect(seqs).toEqual(secondRun.map((m) => m.seq));
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
    // Past the API's grace for a run's end: the stream written anew gets it from Postgres.
    await new Promise((resolve) => setTimeout(resolve, 6_000));
    await restartEmpty();
    await waitFor(
      async () => retries.some((r) => r instanceof FleetApiError && r.status === 410),
      30_000,
      "the reader's 410",
    );
    // The re-read has connected and read what the stream holds now.
    await new Promise((resolve) => setTimeout(resolve, 2_000));
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
    // Past the API's grace for a run's end: the stream written anew gets it from Postgres.
    await new Promise((resolve) => setTimeout(resolve, 6_000));
    await restartEmpty();
    await waitFor(
      async () => retries.some((r) => r instanceof FleetApiError && r.status === 410),
      30_000,
      "the reader's 410",
    );
    // The re-read has connected and read what the stream holds now.
    await new Promise((resolve) => setTimeout(resolve, 3_000));
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
    const { messages } = await client.getSession(id);
    const secondRun = messages.slice(messages.findIndex((m) => m.content === "second"));
    const seqs = events.flatMap((e) =>
      e.type === "MESSAGE" ? [(e.data.message as { seq: number }).seq] : [],
    );
    expect(seqs).toEqual(secondRun.map((m) => m.seq));
  }, 90_000);
});

describe("fleet.events() given an `after` whose place is gone", () => {
  it("rejects with the 410, without reading the stream again: the place was the caller's", async () => {
    const api = await startFakeEventsApi(alwaysGone("event 1-0 is older than the events kept"));
    try {
      const client = new FleetClient({ baseUrl: api.url });
      const read = async () => {
        for await (const _ of client.events("s1", { after: "1-0" })) {
          // nothing comes
        }
      };
      await expect(read()).rejects.toMatchObject({ status: 410 });
      expect(api.asked).toEqual(["1-0"]);
    } finally {
      await api.close();
    }
  });
});

describe("fleet.events() re-reading after a 410", () => {
  it("reads from the run it was in (`?run=`), and from the latest run where the API refuses that", async () => {
    const api = await startFakeEventsApi((last, url) => {
      if (last === "2-0") return { gone: "event 2-0 is older" };
      if (url.includes("?run=")) return { refused: "run" };
      return {
        events:
          last === undefined && api.asked.length === 1
            ? sseEvent("1-0", "RUN_STARTED", { kind: "run" }) +
              sseEvent("2-0", "TOOL_STARTED", { toolCallId: "nap", name: "sleep" })
            : sseEvent("1-0", "RUN_STARTED", { kind: "run" }) +
              sseEvent("2-0", "TOOL_STARTED", { toolCallId: "nap", name: "sleep" }) +
              sseEvent("3-0", "RUN_COMPLETED", { outcome: "completed" }),
      };
    });
    try {
      const client = new FleetClient({ baseUrl: api.url });
      const types: string[] = [];
      for await (const event of client.events("s1", { signal: AbortSignal.timeout(10_000) })) {
        types.push(event.type);
        if (event.type === "RUN_COMPLETED") break;
      }
      expect(types).toEqual(["RUN_STARTED", "TOOL_STARTED", "RUN_COMPLETED"]);
      expect(api.urls).toEqual([
        "/v1/sessions/s1/events",
        "/v1/sessions/s1/events",
        "/v1/sessions/s1/events?run=r1",
        "/v1/sessions/s1/events",
      ]);
      expect(api.asked).toEqual([undefined, "2-0", undefined, undefined]);
    } finally {
      await api.close();
    }
  });

  it("the caller's own `run` starts the read at that run; refused, it rejects rather than read another run", async () => {
    const api = await startFakeEventsApi((_last, url) =>
      url.includes("?run=r9")
        ? { refused: "run" }
        : { events: sseEvent("1-0", "RUN_COMPLETED", { outcome: "completed" }) },
    );
    try {
      const client = new FleetClient({ baseUrl: api.url });
      for await (const event of client.events("s1", { run: "r1" })) {
        expect(event.type).toBe("RUN_COMPLETED");
        break;
      }
      const refused = (async () => {
        for await (const _ of client.events("s1", { run: "r9" })) {
          // nothing comes
        }
      })();
      await expect(refused).rejects.toMatchObject({ status: 400, field: "run" });
      expect(api.urls).toEqual(["/v1/sessions/s1/events?run=r1", "/v1/sessions/s1/events?run=r9"]);
    } finally {
      await api.close();
    }
  });

  it("a second 410 among a re-read's old messages re-reads from the run it had yielded, not theirs", async () => {
    const message = (id: string, runId: string, seq: number) =>
      sseEvent(id, "MESSAGE", { runId, message: { role: "user", content: "x", seq } });
    const api = await startFakeEventsApi((last, url) => {
      if (last === "11-0" || last === "20-0") return { gone: "older" };
      if (url.endsWith("?run=r2") && api.urls.length === 3) return { events: message("20-0", "r1", 1) };
      if (url.endsWith("?run=r2"))
        return { events: sseEvent("30-0", "RUN_COMPLETED", { runId: "r2", outcome: "completed" }) };
      if (url.endsWith("?run=r1"))
        return { events: sseEvent("40-0", "RUN_STARTED", { runId: "r1", kind: "run" }) };
      return {
        events: sseEvent("10-0", "RUN_STARTED", { runId: "r2", kind: "run" }) + message("11-0", "r2", 5),
      };
    });
    try {
      const client = new FleetClient({ baseUrl: api.url });
      const types: string[] = [];
      for await (const event of client.events("s1", { signal: AbortSignal.timeout(10_000) })) {
        types.push(`${event.type}:${event.data.runId}`);
        if (event.type === "RUN_COMPLETED") break;
      }
      expect(types).toEqual(["RUN_STARTED:r2", "MESSAGE:r2", "RUN_COMPLETED:r2"]);
      expect(api.urls.slice(2)).toEqual(Array(3).fill("/v1/sessions/s1/events?run=r2"));
      expect(api.asked).toEqual([undefined, "11-0", undefined, "20-0", undefined]);
    } finally {
      await api.close();
    }
  });
});
