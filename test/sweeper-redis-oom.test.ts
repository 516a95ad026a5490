/**
 * Redis refusing writes (maxmemory reached with `noeviction`: "OOM command not allowed")
 * while sessions wait for a resume: every tick the sweeper's per-session lock is refused.
 * It says so once per session, not once per session per tick (40 stuck sessions made 2,000
 * warnings in 35 s), and resumes them all once Redis takes writes again.
 */
import type { ChildProcess } from "node:child_process";
import { Redis } from "ioredis";
import type pino from "pino";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { parseAgentConfig } from "../src/shared/agent-config.js";
import { SessionLease } from "../src/shared/lease.js";
import { createMetrics } from "../src/shared/metrics.js";
import { RunQueues } from "../src/shared/queues.js";
import { DEFAULT_RESUME_POLICY } from "../src/shared/resume-policy.js";
import { AutomaticResumes } from "../src/shared/store/automatic-resumes.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { SweepQueries } from "../src/sweeper/sweep-queries.js";
import { Sweeper } from "../src/sweeper/sweeper.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { freePort, startRedis, stopRedis } from "./support/private-redis.js";

const AGENT = parseAgentConfig({ model: { provider: "scripted", steps: [{ text: "resumed" }] } });

describe("the sweeper while Redis refuses writes", () => {
  let fleet: FleetEnv;
  let redis: ChildProcess;
  let admin: Redis;
  let queues: RunQueues;

  beforeAll(async () => {
    const port = await freePort();
    redis = await startRedis(port, ["--maxmemory-policy", "noeviction"]);
    admin = new Redis(port, "127.0.0.1");
    fleet = await createFleetEnv("sweeperoom", { redisUrl: `redis://127.0.0.1:${port}` });
    queues = new RunQueues(fleet.redis, fleet.config.prefix);
  });
  afterAll(async () => {
    await queues?.close();
    await fleet?.close();
    admin?.disconnect();
    if (redis) await stopRedis(redis);
  });

  it("warns once per session, not every tick, and resumes every session once writes pass", async () => {
    const queries = new SessionQueries(fleet.database);
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      const { id } = await queries.createSession({
        agent: AGENT,
        messages: [{ role: "user", content: `q${i}` }],
      });
      ids.push(id);
    }
    await fleet.database.sql`update sessions set run_started = true where id in ${fleet.database.sql(ids)}`;
    const metrics = createMetrics("sweeper-oom");
    const log = { info: vi.fn(), warn: vi.fn(), debug: vi.fn() };
    const sweeper = new Sweeper({
      prefix: fleet.config.prefix,
      redis: fleet.redis,
      lease: new SessionLease(fleet.redis, fleet.config.prefix, fleet.config.leaseTtlMs),
      queries,
      sweeps: new SweepQueries(fleet.database),
      queues,
      metrics,
      resumes: new AutomaticResumes(fleet.database, DEFAULT_RESUME_POLICY, metrics),
      log: log as unknown as pino.Logger,
    });

    await admin.config("SET", "maxmemory", "1"); // every write is refused from now on
    for (let tick = 0; tick < 10; tick++)
      expect(await sweeper.sweepInterrupted()).toEqual({ resumed: 0, parked: 0 });
    const warned = log.warn.mock.calls.filter(([, msg]) => /sweeping a session failed/.test(String(msg)));
    expect(warned.map(([fields]) => (fields as { sessionId: string }).sessionId).sort()).toEqual(
      [...ids].sort(),
    );
    expect(String((warned[0]![0] as { err: Error }).err.message)).toMatch(/OOM/);

    await admin.config("SET", "maxmemory", "0");
    expect(await sweeper.sweepInterrupted()).toEqual({ resumed: 5, parked: 0 });
    const resumes = await fleet.database.sql`select 1 from runs where kind = 'resume' and status = 'queued'`;
    expect(resumes).toHaveLength(5);
  });
});
