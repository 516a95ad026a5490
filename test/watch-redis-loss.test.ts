/**
 * `fleet watch` (a real CLI process) across a Redis that restarts empty while it follows a
 * run: the fleet rides it out and the run completes, but the watch's own reconnect, with the
 * last id it printed, is answered `410 expired` (the stream was rebuilt from Postgres under new
 * ids). Before, the watch printed the 410 and exited 2 — though it had been given no id, and
 * the client's run and batch streams read the rebuilt stream again
 * (test/client-streams-redis-loss.test.ts). Now it follows on the same way: it reads the
 * session's stream again from its latest run, leaves out what it had printed
 * (src/producer/stream-reread.ts), says so on stderr, and `--once` ends at the run's end.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { watchCommand } from "../src/commands/watch.js";
import { exitedWithOutput } from "./support/child-exit.js";
import { alwaysGone, sseEvent, startFakeEventsApi } from "./support/fake-events-api.js";
import { FLEET_BIN, waitFor } from "./support/fleet-env.js";
import { startRedis, stopRedis } from "./support/private-redis.js";
import { type PrivateRedisFleet, startPrivateRedisFleet } from "./support/private-redis-fleet.js";

const agent = {
  model: {
    provider: "scripted" as const,
    steps: [
      { toolCalls: [{ id: "nap", name: "sleep", arguments: { ms: 8_000 } }] },
      { toolCalls: [{ id: "nap2", name: "sleep", arguments: { ms: 200 } }] },
      { text: "done" },
    ],
  },
  tools: ["sleep"],
};

describe("fleet watch when Redis restarts empty under it", () => {
  let f: PrivateRedisFleet;
  let watch: ChildProcess | undefined;

  beforeAll(async () => {
    f = await startPrivateRedisFleet("watchredisloss");
    await f.fleet.spawnWorker();
  }, 90_000);
  afterAll(async () => {
    watch?.kill("SIGKILL");
    await f?.sweeper.stop();
    await f?.fleet.close();
    if (f?.redis) await stopRedis(f.redis);
  });

  it("follows the run to its end, every stored message printed once, instead of exiting 2 on the 410", async () => {
    const { client, fleet } = f;
    const { id } = await client.createSession({ agent });
    const { runId } = await client.send(id, "go");
    const { sql } = fleet.database;
    await waitFor(
      async () => (await sql`select 1 from runs where id = ${runId} and status = 'running'`).length === 1,
      30_000,
      "the run started",
    );
    watch = spawn(process.execPath, [FLEET_BIN, "watch", id, "--json", "--once", "--api", f.api.url], {
      env: { ...process.env, ...fleet.env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    watch.stdout!.on("data", (d) => {
      stdout += d;
    });
    watch.stderr!.on("data", (d) => {
      stderr += d;
    });
    const exited = exitedWithOutput(watch);
    // Inside the 8 s nap, the watch at its place in the stream: Redis goes, and comes back empty.
    await waitFor(
      async () => stdout.includes('"TOOL_STARTED"'),
      30_000,
      "the watch printed the tool's start",
    );
    await stopRedis(f.redis);
    f.redis = await startRedis(f.port);
    const code = await exited;
    const events = stdout
      .split("\n")
      .filter(Boolean)
      .map((line) => JSON.parse(line) as { type: string; data: Record<string, unknown> });
    expect(code, stderr).toBe(0);
    expect(events.at(-1)).toMatchObject({ type: "RUN_COMPLETED", data: { runId, outcome: "completed" } });
    const seqs = events.flatMap((e) =>
      e.type === "MESSAGE" ? [(e.data.message as { seq: number }).seq] : [],
    );
    const { messages } = await client.getSession(id);
    expect(seqs).toEqual(messages.map((m) => m.seq));
    const tools = events.flatMap((e) => (e.type === "TOOL_STARTED" ? [e.data.toolCallId] : []));
    expect(tools).toEqual(["nap", "nap2"]);
    expect(stderr).toMatch(/read again/);
  }, 90_000);
});

describe("fleet watch --after with an id whose place is gone", () => {
  /** `fleet watch s1 --after 1-0 --json --once` against the fake API at `url`: its exit code, the types it printed, its stderr. */
  async function watchAfter(url: string, signal: AbortSignal) {
    const out: string[] = [];
    const err: string[] = [];
    const sink = (into: string[]) =>
      new Writable({
        write(chunk, _encoding, done) {
          into.push(String(chunk));
          done();
        },
      });
    const code = await watchCommand("s1", {
      api: url,
      after: "1-0",
      json: true,
      once: true,
      io: { stdout: sink(out), stderr: sink(err) },
      signal,
    });
    const types = out
      .join("")
      .split("\n")
      .filter(Boolean)
      .map((line) => (JSON.parse(line) as { type: string }).type);
    return { code, types, err: err.join("") };
  }

  it("still exits 2 on the 410, without reading the stream again: the place was the user's", async () => {
    const api = await startFakeEventsApi(alwaysGone("event 1-0 is older than the events kept"));
    try {
      const { code, types, err } = await watchAfter(api.url, new AbortController().signal);
      expect(code).toBe(2);
      expect(types).toEqual([]);
      expect(api.asked).toEqual(["1-0"]);
      expect(err).toMatch(/older than the events kept/);
    } finally {
      await api.close();
    }
  });

  it("reads on without an id, what it printed left out, when the 410 is for an id it received since --after", async () => {
    const api = await startFakeEventsApi((last) => {
      if (last === "5-0") return { gone: "event 5-0 is older" };
      // One event after the user's id, then the connection drops.
      if (last === "1-0")
        return { events: sseEvent("5-0", "TOOL_STARTED", { toolCallId: "nap", name: "sleep" }) };
      return {
        events:
          sseEvent("1-0", "RUN_STARTED", { kind: "run", trigger: "user" }) +
          sseEvent("2-0", "TOOL_STARTED", { toolCallId: "nap", name: "sleep" }) +
          sseEvent("3-0", "RUN_COMPLETED", { outcome: "completed" }),
      };
    });
    try {
      const { code, types, err } = await watchAfter(api.url, new AbortController().signal);
      expect(code, err).toBe(0);
      expect(api.asked).toEqual(["1-0", "5-0", undefined]);
      // The tool's start once; the run's start, not printed before, now.
      expect(types).toEqual(["TOOL_STARTED", "RUN_STARTED", "RUN_COMPLETED"]);
      expect(err).toMatch(/read again/);
    } finally {
      await api.close();
    }
  });

  it("reads on from the run it was in (`?run=`), not the stream's end, when the stream was written anew mid-run", async () => {
    const run =
      sseEvent("1-0", "RUN_STARTED", { kind: "run", trigger: "user" }) +
      sseEvent("2-0", "TOOL_STARTED", { toolCallId: "nap", name: "sleep" }) +
      sseEvent("3-0", "RUN_COMPLETED", { outcome: "completed" });
    const api = await startFakeEventsApi((last, url) => {
      if (last === "5-0") return { gone: "event 5-0 is older" };
      if (last === "1-0")
        return { events: sseEvent("5-0", "TOOL_STARTED", { toolCallId: "nap", name: "sleep" }) };
      // Without an id, the API starts at the stream's end when it holds no RUN_STARTED of the
      // latest run (written anew mid-run): the run's end is before it.
      return { events: url.includes("?run=r1") ? run : "" };
    });
    try {
      const { code, types, err } = await watchAfter(api.url, AbortSignal.timeout(5_000));
      expect(code, err).toBe(0);
      expect(types).toEqual(["TOOL_STARTED", "RUN_STARTED", "RUN_COMPLETED"]);
      expect(api.urls[2]).toBe("/v1/sessions/s1/events?run=r1");
    } finally {
      await api.close();
    }
  });
});
