/**
 * A sweeper SIGKILLed while it holds a session's sweep lock (after ending its run, before
 * queuing its resume) left that session to wait for the lock's 10 s TTL: the chaos run's
 * p99 of 10.8 s (docs/performance.md, 5 December). A lock whose holder's named connection is
 * gone from CLIENT LIST in two looks is taken over at once; a live holder's lock, or one
 * of a holder without a name, is still respected.
 */
import { randomUUID } from "node:crypto";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { parseAgentConfig } from "../src/shared/agent-config.js";
import { SessionLease } from "../src/shared/lease.js";
import { createMetrics } from "../src/shared/metrics.js";
import { RunQueues } from "../src/shared/queues.js";
import { closeRedis, createRedis } from "../src/shared/redis.js";
import { DEFAULT_RESUME_POLICY } from "../src/shared/resume-policy.js";
import { AutomaticResumes } from "../src/shared/store/automatic-resumes.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { liveSweepers, sweeperName } from "../src/sweeper/liveness.js";
import { SWEEP_LOCK_MS, sweepLockToken } from "../src/sweeper/sweep-locks.js";
import { SweepQueries } from "../src/sweeper/sweep-queries.js";
import { Sweeper } from "../src/sweeper/sweeper.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

const AGENT = parseAgentConfig({ model: { provider: "scripted", steps: [{ text: "resumed" }] } });

describe("a sweep lock left by a dead sweeper", () => {
  let fleet: FleetEnv;
  let queues: RunQueues;

  beforeAll(async () => {
    fleet = await createFleetEnv("sweeperdeadlock");
    queues = new RunQueues(fleet.redis, fleet.config.prefix);
  });
  afterAll(async () => {
    await queues?.close();
    await fleet?.close();
  });

  /** A sweeper named as sweeper-process names it (its connection is fleet.redis, unnamed: only the token matters). */
  function sweeper(name: string | undefined, now?: () => number): Sweeper {
    const metrics = createMetrics("sweeper-test");
    return new Sweeper(
      {
        prefix: fleet.config.prefix,
        redis: fleet.redis,
        lease: new SessionLease(fleet.redis, fleet.config.prefix, fleet.config.leaseTtlMs),
        queries: new SessionQueries(fleet.database),
        sweeps: new SweepQueries(fleet.database),
        queues,
        metrics,
        resumes: new AutomaticResumes(fleet.database, DEFAULT_RESUME_POLICY, metrics),
        log: pino({ level: "silent" }),
        name,
        now,
      },
      { confirmDeathMs: 0 },
    );
  }

  /**
   * An interrupted session nobody runs (its run ended, no resume queued), its sweep lock
   * held by a sweeper whose named connection is open, or was closed (the process died).
   */
  async function lockedSession(holder: { alive: boolean }): Promise<{
    sessionId: string;
    lockTtlMs: () => Promise<number>;
    close: () => Promise<void>;
  }> {
    const name = sweeperName(fleet.config.prefix, `gone-${randomUUID().slice(0, 8)}`);
    const conn = createRedis(fleet.config.redisUrl, "worker", name);
    await waitFor(
      async () => (await liveSweepers(fleet.redis, fleet.config.prefix))?.has(name) === true,
      5_000,
      "the other sweeper's connection listed",
    );
    const { id } = await new SessionQueries(fleet.database).createSession({
      agent: AGENT,
      messages: [{ role: "user", content: "question" }],
    });
    await fleet.database.sql`update sessions set run_started = true where id = ${id}`;
    const key = `${fleet.config.prefix}:sweep-lock:${id}`;
    await conn.set(key, sweepLockToken(name), "PX", SWEEP_LOCK_MS);
    if (!holder.alive) {
      await closeRedis(conn);
      await waitFor(
        async () => (await liveSweepers(fleet.redis, fleet.config.prefix))?.has(name) === false,
        5_000,
        "the dead sweeper's connection gone",
      );
    }
    return {
      sessionId: id,
      lockTtlMs: () => fleet.redis.pttl(key),
      close: async () => {
        if (holder.alive) await closeRedis(conn);
      },
    };
  }

  async function queuedResumes(sessionId: string): Promise<number> {
    const [row] = await fleet.database.sql<{ n: number }[]>`
      select count(*)::int as n from runs where session_id = ${sessionId} and kind = 'resume' and status = 'queued'`;
    return row!.n;
  }

  // First: a lock left by another test's sweeper would be looked up at every look.
  it("held by a listed sweeper, is looked up with one CLIENT LIST a second, not one a look", async () => {
    const live = await lockedSession({ alive: true });
    const clock = { now: Date.now() };
    const clientCalls = vi.spyOn(fleet.redis, "client");
    try {
      const named = sweeper(sweeperName(fleet.config.prefix, "survivor-3"), () => clock.now);
      for (let look = 0; look < 5; look++) {
        await named.sweepInterrupted();
        clock.now += 100;
      }
      expect(clientCalls.mock.calls.filter((call) => String(call[0]) === "LIST")).toHaveLength(1);
      clock.now += 1_000;
      await named.sweepInterrupted();
      expect(clientCalls.mock.calls.filter((call) => String(call[0]) === "LIST")).toHaveLength(2);
      expect(await queuedResumes(live.sessionId)).toBe(0);
    } finally {
      clientCalls.mockRestore();
      await live.close();
    }
  });

  it("is taken over once its holder is missing from two looks, and the session resumed", async () => {
    const session = await lockedSession({ alive: false });
    const mine = sweeper(sweeperName(fleet.config.prefix, "survivor"));
    // The first look sees the holder missing; the second confirms it (confirmDeathMs 0).
    await mine.sweepInterrupted();
    expect(await queuedResumes(session.sessionId)).toBe(0);
    await mine.sweepInterrupted();
    expect(await queuedResumes(session.sessionId)).toBe(1);
    // The lock was released after the resume was queued, not left to expire.
    expect(await session.lockTtlMs()).toBe(-2);
  });

  it("is respected while its holder's connection is listed, and by a sweeper with no name", async () => {
    const live = await lockedSession({ alive: true });
    const dead = await lockedSession({ alive: false });
    try {
      const named = sweeper(sweeperName(fleet.config.prefix, "survivor-2"));
      const unnamed = sweeper(undefined);
      for (let look = 0; look < 3; look++) {
        await named.sweepInterrupted();
        await unnamed.sweepInterrupted();
      }
      expect(await queuedResumes(live.sessionId)).toBe(0);
      expect(await live.lockTtlMs()).toBeGreaterThan(0);
      // The dead holder's lock was taken over (by the named sweeper: the other cannot tell).
      expect(await queuedResumes(dead.sessionId)).toBe(1);
    } finally {
      await live.close();
      await dead.close();
    }
  });
});
