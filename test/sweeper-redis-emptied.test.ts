/**
 * Redis emptied under connections that stay up: a FLUSHALL here (a managed Redis restarted
 * empty behind a proxy that keeps its clients' connections is the same). Every session lease
 * is gone, but the workers are alive, listed in CLIENT LIST, and take their leases back at
 * their next renewal (lease-keeper.ts), a third of a TTL later. Before, the sweeper took a
 * missing lease for an expired one at its next tick (200 ms) and ended those runs `stalled`:
 * the tools they were running were answered as interrupted and their sessions moved to
 * another worker. Now a changed or missing marker key (redis-data-loss.ts) counts as Redis
 * trouble: no missing lease is judged for a TTL, for every sweeper that looked before. On a
 * Redis that refuses CLIENT LIST the sweeper reads liveness from the workers' heartbeats,
 * which the same loss takes: every worker looked dead two looks (150 ms) later and every run
 * ended `crashed`; missing heartbeats are now judged as missing leases are.
 */
import type { ChildProcess } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { SessionLease } from "../src/shared/lease.js";
import { RunQueues } from "../src/shared/queues.js";
import { markerLost } from "../src/sweeper/redis-data-loss.js";
import type { RunningSweeper } from "../src/sweeper/sweeper-process.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { freePort, startRedis, stopRedis } from "./support/private-redis.js";
import { startPrivateRedisFleet } from "./support/private-redis-fleet.js";
import { sweeperOf, withFrozenWorkersRun } from "./support/stalled-run.js";

describe("the sweeper when Redis is emptied under it", () => {
  let server: ChildProcess;
  let fleet: FleetEnv;
  let queues: RunQueues;

  beforeAll(async () => {
    const port = await freePort();
    server = await startRedis(port);
    fleet = await createFleetEnv("redisemptied", { redisUrl: `redis://127.0.0.1:${port}` });
    queues = new RunQueues(fleet.redis, fleet.config.prefix);
  });
  afterAll(async () => {
    await queues?.close();
    await fleet?.close();
    if (server) await stopRedis(server);
  });

  it("pure rule: a marker that changed or went is a loss; the first look is none", () => {
    expect(markerLost(undefined, "a")).toBe(false);
    expect(markerLost("a", "a")).toBe(false);
    expect([markerLost("a", "b"), markerLost("a", null)]).toEqual([true, true]);
  });

  it("leaves a live worker's run alone while it takes its lease back; a lease not taken back is judged a TTL later", async () => {
    const clock = { now: 1_000_000 };
    const ttl = fleet.config.leaseTtlMs;
    // Two sweepers: the second must see the loss too, though the first wrote a new marker.
    const sweepers = [0, 1].map(() => sweeperOf(fleet, queues, { now: () => clock.now }));
    const lease = new SessionLease(fleet.redis, fleet.config.prefix, ttl);
    await withFrozenWorkersRun(fleet, async ({ sessionId, workerId, runStatus }) => {
      const token = await lease.acquire(sessionId, workerId);
      expect(token).not.toBeNull();
      for (const sweeper of sweepers) expect(await sweeper.sweepAbandoned()).toBe(0);

      expect(await fleet.redis.flushall()).toBe("OK");
      expect(await lease.holder(sessionId)).toBeNull();
      for (const sweeper of sweepers) expect(await sweeper.sweepAbandoned()).toBe(0);
      expect((await runStatus()).status).toBe("running");

      // The worker's next renewal takes the lease back; the run goes on, a TTL later too.
      expect(await lease.hold(sessionId, token!)).toBe("retaken");
      clock.now += ttl;
      for (const sweeper of sweepers) expect(await sweeper.sweepAbandoned()).toBe(0);
      expect((await runStatus()).status).toBe("running");

      // Then it freezes: its lease expires, and a missing lease is judged again.
      await fleet.redis.del(lease.key(sessionId));
      expect(await sweepers[0]!.sweepAbandoned()).toBe(1);
      expect(await runStatus()).toEqual({ status: "ended", ended_reason: "stalled" });
    });
  });
});

describe("a sweeper that starts after Redis was emptied", () => {
  let server: ChildProcess;
  let fleet: FleetEnv;
  let queues: RunQueues;

  beforeAll(async () => {
    const port = await freePort();
    server = await startRedis(port);
    fleet = await createFleetEnv("redisemptiedstart", { redisUrl: `redis://127.0.0.1:${port}` });
    queues = new RunQueues(fleet.redis, fleet.config.prefix);
  });
  afterAll(async () => {
    await queues?.close();
    await fleet?.close();
    if (server) await stopRedis(server);
  });

  // It saw no marker before (none is left to compare), so its first looks say no loss: a
  // live worker's lease, not yet taken back, looked expired, and its run was ended `stalled`.
  // Losses before it started are not told apart from a new fleet: it judges no missing lease
  // for its first TTL, as after Redis trouble (a lease lost before it started is back by then).
  it("leaves a live worker's run alone for a TTL; a lease not taken back is judged then", async () => {
    const clock = { now: 1_000_000 };
    const ttl = fleet.config.leaseTtlMs;
    const lease = new SessionLease(fleet.redis, fleet.config.prefix, ttl);
    await withFrozenWorkersRun(fleet, async ({ sessionId, workerId, runStatus }) => {
      const token = await lease.acquire(sessionId, workerId);
      expect(token).not.toBeNull();
      expect(await fleet.redis.flushall()).toBe("OK");
      const sweeper = sweeperOf(fleet, queues, { now: () => clock.now, startGraceMs: ttl });
      expect(await sweeper.sweepAbandoned()).toBe(0);
      expect((await runStatus()).status).toBe("running");

      // The worker's next renewal takes the lease back: its run goes on, a TTL later too.
      expect(await lease.hold(sessionId, token!)).toBe("retaken");
      clock.now += ttl;
      expect(await sweeper.sweepAbandoned()).toBe(0);
      expect((await runStatus()).status).toBe("running");

      // Then it freezes: its lease expires, and the missing lease is judged.
      await fleet.redis.del(lease.key(sessionId));
      expect(await sweeper.sweepAbandoned()).toBe(1);
      expect(await runStatus()).toEqual({ status: "ended", ended_reason: "stalled" });
    });
  });
});

describe.each([
  ["", []],
  [
    " that refuses CLIENT LIST (liveness from heartbeats, which went too)",
    ["--rename-command", "CLIENT", ""],
  ],
])("workers inside a tool when a Redis%s is emptied", (_what, redisArgs) => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let sweeper: RunningSweeper;
  let redis: ChildProcess;

  beforeAll(async () => {
    ({ redis, fleet, client, sweeper } = await startPrivateRedisFleet("redisemptiedtool", redisArgs));
  });
  afterAll(async () => {
    await sweeper?.stop();
    await fleet?.close();
    if (redis) await stopRedis(redis);
  });

  it("every run goes on where it was: completed in one piece, no call answered as interrupted", async () => {
    await Promise.all([fleet.spawnWorker(), fleet.spawnWorker()]);
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) {
      const { id } = await client.createSession({
        agent: {
          model: {
            provider: "scripted",
            steps: [
              { toolCalls: [{ id: "nap", name: "sleep", arguments: { ms: 5_000 } }] },
              { text: "done" },
            ],
          },
          tools: ["sleep"],
        },
      });
      ids.push(id);
      await client.send(id, `session ${i}`);
    }
    const { sql } = fleet.database;
    // Every session inside its tool, its run older than a lease TTL.
    await waitFor(
      async () => (await sql`select 1 from messages where role = 'assistant'`).length === ids.length,
      30_000,
      "every session inside its tool",
    );
    await waitFor(
      async () =>
        (
          await sql`select 1 from runs where status = 'running'
                       and started_at < now() - make_interval(secs => ${(1.2 * fleet.config.leaseTtlMs) / 1000})`
        ).length === ids.length,
      10_000,
      "every run older than a lease TTL",
    );
    expect(await fleet.redis.flushall()).toBe("OK");

    await waitFor(
      async () => (await sql`select 1 from sessions where tail_state = 'completed'`).length === ids.length,
      45_000,
      "every session completed",
    );
    const runs = await sql<{ ended_reason: string }[]>`select ended_reason from runs`;
    expect(runs.map((run) => run.ended_reason)).toEqual(ids.map(() => "completed"));
    for (const id of ids) {
      const session = await client.getSession(id);
      expect(session.messages.map((m) => m.seq)).toEqual(session.messages.map((_, n) => n + 1));
      expect(session.messages.filter((m) => m.role === "tool")).toMatchObject([
        { toolCallId: "nap", success: true },
      ]);
    }
  }, 120_000);
});
