/**
 * Redis Cluster and managed Redis (README "Redis Cluster and managed Redis"):
 * - REDIS_URL `redis+cluster://…` selects a cluster, and the effective FLEET_PREFIX is a hash
 *   tag, so every key of a fleet lands in one slot;
 * - on a real 3-master cluster: a worker's liveness name is listed on every master, the
 *   sweeper pools CLIENT LIST over the masters, and a real fleet (API, sweeper, worker) runs
 *   sessions, events, fair dispatch, request rates and the cancel channel there;
 * - on a Redis that refuses CLIENT LIST (`rename-command CLIENT ""`), the sweeper switches to
 *   the workers' heartbeats by itself and a SIGKILLed worker's sessions still come back.
 * `npm run test:cluster` runs the crash, frozen-worker, sweeper-concurrency and demo tests on
 * a cluster besides.
 */
import { Writable } from "node:stream";
import type { Redis } from "ioredis";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadConfig } from "../src/shared/config.js";
import { ValidationError } from "../src/shared/errors.js";
import { closeRedis, createRedis, masters, parseRedisUrl, scanKeys } from "../src/shared/redis.js";
import { beat, heartbeats, livenessName } from "../src/shared/worker-signals.js";
import { livenessMode, liveWorkers } from "../src/sweeper/liveness.js";
import { type RunningSweeper, startSweeper } from "../src/sweeper/sweeper-process.js";
import { createFleetEnv, type FleetEnv, readyInfo, waitFor } from "./support/fleet-env.js";
import { type RedisHandle, startRedisCluster, startRedisServer } from "./support/redis-cluster.js";
import { INTERRUPTED_TEXT, startSleepySessions } from "./support/sleepy-sessions.js";

describe("REDIS_URL and FLEET_PREFIX for a Redis Cluster", () => {
  it("parses seed nodes, credentials and TLS from redis+cluster:// and rediss+cluster://", () => {
    expect(parseRedisUrl("redis://127.0.0.1:6379/2")).toEqual({
      mode: "single",
      url: "redis://127.0.0.1:6379/2",
    });
    expect(parseRedisUrl("redis+cluster://10.0.0.1:7000,10.0.0.2,[::1]:7002/")).toEqual({
      mode: "cluster",
      nodes: [
        { host: "10.0.0.1", port: 7000 },
        { host: "10.0.0.2", port: 6379 },
        { host: "::1", port: 7002 },
      ],
      username: undefined,
      password: undefined,
      tls: false,
    });
    expect(parseRedisUrl("rediss+cluster://fleet:s%40cret@redis.example:6380")).toMatchObject({
      mode: "cluster",
      username: "fleet",
      password: "s@cret",
      tls: true,
    });
    expect(parseRedisUrl("redis+cluster://:pw@h:1")).toMatchObject({ username: undefined, password: "pw" });
  });

  it("hash-tags the prefix on a cluster, keeps a tagged one, and refuses stray braces", () => {
    const cluster = "redis+cluster://127.0.0.1:7000";
    expect(loadConfig({}).prefix).toBe("fleet");
    expect(loadConfig({}).redisCluster).toBe(false);
    expect(loadConfig({ REDIS_URL: cluster })).toMatchObject({ prefix: "{fleet}", redisCluster: true });
    expect(loadConfig({ REDIS_URL: cluster, FLEET_PREFIX: "acme" }).prefix).toBe("{acme}");
    expect(loadConfig({ REDIS_URL: cluster, FLEET_PREFIX: "{acme}" }).prefix).toBe("{acme}");
    // `fleet demo` runs as `<prefix>-demo`: still the fleet's tag, so still one slot.
    expect(loadConfig({ REDIS_URL: cluster, FLEET_PREFIX: "{acme}-demo" }).prefix).toBe("{acme}-demo");
    expect(loadConfig({ FLEET_PREFIX: "{acme}" }).prefix).toBe("{acme}");
    for (const bad of ["acme{", "{acme", "{}", "a{b}", "{a}{b}", "{a}b}", ""])
      expect(() => loadConfig({ REDIS_URL: cluster, FLEET_PREFIX: bad }), bad).toThrow(ValidationError);
    expect(() => loadConfig({ REDIS_URL: "redis+cluster://127.0.0.1:7000/3" })).toThrow(/REDIS_URL/);
    expect(() => loadConfig({ REDIS_URL: "redis+cluster://h:port" })).toThrow(/REDIS_URL/);
  });
});

describe("a real 3-master Redis Cluster", () => {
  let cluster: RedisHandle;
  let sweeperRedis: Redis;
  beforeAll(async () => {
    cluster = await startRedisCluster(3);
    sweeperRedis = createRedis(cluster.url, "worker");
  }, 60_000);
  afterAll(async () => {
    if (sweeperRedis) await closeRedis(sweeperRedis);
    await cluster?.stop();
  });

  it("lists a worker's liveness name on every master, pools them, and drops a closed one at once", async () => {
    const prefix = "{lv}";
    const worker = createRedis(cluster.url, "worker", livenessName(prefix, "w-1"));
    const names = (node: Redis) => node.client("LIST") as Promise<string>;
    await waitFor(async () => (await liveWorkers(sweeperRedis, prefix)).has("w-1"), 5_000, "w-1 listed");
    expect(livenessMode(sweeperRedis)).toBe("client-list");
    const nodes = masters(sweeperRedis);
    expect(nodes).toHaveLength(3);
    await waitFor(
      async () =>
        (await Promise.all(nodes.map(names))).every((list) => list.includes(`name=${prefix}:live:w-1 `)),
      5_000,
      "the name on all three masters",
    );
    await closeRedis(worker);
    await waitFor(
      async () => !(await liveWorkers(sweeperRedis, prefix)).has("w-1"),
      1_000,
      "w-1 gone within a second of closing",
    );
  });

  it("keeps heartbeats in one key, on Redis's clock", async () => {
    await beat(sweeperRedis, "{hb}", "w-a", 300);
    await beat(sweeperRedis, "{hb}", "w-b", 5_000);
    expect(await heartbeats(sweeperRedis, "{hb}")).toEqual(new Set(["w-a", "w-b"]));
    await new Promise((r) => setTimeout(r, 400));
    // A beat drops lapsed ids even where no sweeper reads the heartbeats.
    await beat(sweeperRedis, "{hb}", "w-c", 5_000);
    expect((await sweeperRedis.zrange("{hb}:alive", "0", "-1")).sort()).toEqual(["w-b", "w-c"]);
    await sweeperRedis.zrem("{hb}:alive", "w-c");
    expect(await heartbeats(sweeperRedis, "{hb}")).toEqual(new Set(["w-b"]));
  });

  describe("a fleet on it", () => {
    let fleet: FleetEnv;
    let sweeper: RunningSweeper;
    beforeAll(async () => {
      fleet = await createFleetEnv("cluster", {
        redisUrl: cluster.url,
        // Request rates and fair dispatch run their Lua scripts on the cluster too.
        env: { FLEET_TENANT_REQUESTS_PER_SECOND: "1000", FLEET_FAIR_DISPATCH: "on" },
      });
      sweeper = await startSweeper({ ...loadConfig(fleet.env), logLevel: "silent" }, { serveMetrics: false });
    }, 60_000);
    afterAll(async () => {
      await sweeper?.stop();
      await fleet?.close();
    });

    it("runs sessions with events, cancels through the cancel channel, and keeps every key in one slot", async () => {
      expect(fleet.config.prefix).toMatch(/^\{t-cluster_[0-9a-f]{8}\}$/);
      const { client } = await fleet.startApi();
      const worker = await fleet.spawnWorker();
      const workerId = readyInfo(worker).workerId;
      expect(await liveWorkers(fleet.redis, fleet.config.prefix)).toContain(workerId);

      // Two sessions: one completes (its events arrive over the cluster's pub/sub and streams),
      // one is cancelled while inside a long sleep (the API's cancel channel reaches the worker).
      const [done] = await startSleepySessions(client, 1, { file: "short", sleepMs: 400 });
      const [cancelled] = await startSleepySessions(client, 1, { file: "long", sleepMs: 60_000 });
      const types: string[] = [];
      for await (const event of client.events(done!, { signal: AbortSignal.timeout(20_000) })) {
        types.push(event.type);
        if (event.type === "RUN_COMPLETED") break;
      }
      expect(types[0]).toBe("RUN_STARTED");
      expect(types).toContain("TOOL_FINISHED");
      expect(types.at(-1)).toBe("RUN_COMPLETED");
      expect((await client.getSession(done!)).status).toBe("completed");

      await waitFor(
        async () =>
          (
            await fleet.database.sql<{ n: number }[]>`
              select count(*)::int as n from messages where session_id = ${cancelled!} and tool_call_id = 'log'`
          )[0]!.n === 1,
        10_000,
        "the long session inside its sleep",
      );
      await client.cancelSession(cancelled!);
      await waitFor(
        async () => {
          const [row] = await fleet.database.sql<{ content: string }[]>`
            select content from messages where session_id = ${cancelled!} and tool_call_id = 'nap'`;
          return row !== undefined && /^Cancelled while running/.test(row.content);
        },
        5_000,
        "the sleep aborted by the cancel message",
      );

      // Every key of the fleet: on one master, in one slot (the prefix's hash tag).
      const keys = await scanKeys(fleet.redis, `${fleet.config.prefix}:*`);
      expect(keys.length).toBeGreaterThan(10);
      expect(keys.some((k) => k.includes(":runs:"))).toBe(true); // BullMQ's
      expect(keys.some((k) => k.includes(":events:"))).toBe(true); // session events
      expect(keys.some((k) => k.endsWith(":alive"))).toBe(true); // heartbeats
      const perMaster = await Promise.all(
        masters(fleet.redis).map(async (node) => (await scanKeys(node, `${fleet.config.prefix}:*`)).length),
      );
      expect(perMaster.filter((n) => n > 0)).toHaveLength(1);
      const slots = new Set(await Promise.all(keys.map((key) => fleet.redis.cluster("KEYSLOT", key))));
      expect(slots.size).toBe(1);
    }, 60_000);
  });
});

describe("a Redis that refuses CLIENT LIST (managed Redis)", () => {
  let redis: RedisHandle;
  let fleet: FleetEnv;
  let sweeper: RunningSweeper;
  const logLines: string[] = [];
  beforeAll(async () => {
    redis = await startRedisServer(["--rename-command", "CLIENT", ""]);
    fleet = await createFleetEnv("noclientlist", { redisUrl: redis.url });
    const sink = new Writable({
      write(chunk, _encoding, done) {
        logLines.push(String(chunk));
        done();
      },
    });
    sweeper = await startSweeper(loadConfig(fleet.env), {
      serveMetrics: false,
      logger: pino({ level: "info" }, sink),
    });
  }, 60_000);
  afterAll(async () => {
    await sweeper?.stop();
    await fleet?.close();
    await redis?.stop();
  });

  it("switches to heartbeats by itself, says so once, and resumes a SIGKILLed worker's sessions", async () => {
    await expect(fleet.redis.client("LIST")).rejects.toThrow(/unknown command/);
    const { client } = await fleet.startApi();
    const [victim, survivor] = await Promise.all([fleet.spawnWorker(), fleet.spawnWorker()]);
    const victimId = readyInfo(victim).workerId;
    const ids = await startSleepySessions(client, 6, { file: "hb", sleepMs: 3_000 });
    const { sql } = fleet.database;
    await waitFor(
      async () =>
        (await sql<{ n: number }[]>`select count(*)::int as n from messages where tool_call_id = 'log'`)[0]!
          .n === 6,
      20_000,
      "all sessions inside the sleep",
    );
    const onVictim = await sql<{ session_id: string }[]>`
      select session_id from runs where kind = 'run' and worker_id = ${victimId}`;
    expect(onVictim.length).toBeGreaterThan(0);
    const switched = logLines.filter((l) => /Redis refuses CLIENT LIST/.test(l));
    expect(switched).toHaveLength(1);
    expect(JSON.parse(switched[0]!)).toMatchObject({ liveness: "heartbeat" });

    const killedAt = Date.now();
    victim.child.kill("SIGKILL");
    await victim.exited;
    await waitFor(
      async () =>
        (
          await sql<{ n: number }[]>`select count(*)::int as n from sessions where tail_state = 'completed'`
        )[0]!.n === 6,
      20_000,
      "all 6 sessions completed",
    );
    expect(survivor.child.exitCode).toBeNull();
    const latencies: number[] = [];
    for (const { session_id } of onVictim) {
      const session = await client.getSession(session_id);
      expect(session.messages.map((m) => m.seq)).toEqual(session.messages.map((_, i) => i + 1));
      const nap = session.messages.filter((m) => m.role === "tool" && m.toolCallId === "nap");
      expect(nap).toEqual([expect.objectContaining({ success: false, content: INTERRUPTED_TEXT })]);
      expect(session.runs.find((r) => r.kind === "run")?.endedReason).toBe("crashed");
      const resume = session.runs.find((r) => r.kind === "resume");
      expect(resume).toMatchObject({
        trigger: "sweeper",
        resumeKind: "recover_tools",
        endedReason: "completed",
      });
      latencies.push(new Date(resume!.startedAt!).getTime() - killedAt);
    }
    for (const id of ids) {
      const session = await client.getSession(id);
      const callIds = session.messages.flatMap((m) => (m.role === "tool" ? [m.toolCallId] : []));
      expect(new Set(callIds).size).toBe(callIds.length);
    }
    // A heartbeat lapses within a lease TTL (2 s here), not within milliseconds.
    console.log(
      `heartbeat liveness: kill → resume start max ${Math.max(...latencies)} ms (LEASE_TTL_MS ${fleet.config.leaseTtlMs})`,
    );
    // A figure, not an assertion; the trigger above shows the sweeper's heartbeat check found it.
    // Still one line about the mode, however many ticks since.
    expect(logLines.filter((l) => /worker liveness:/.test(l))).toHaveLength(1);
  }, 60_000);
});
