/**
 * Postgres connections dropped (pg_terminate_backend) and Redis restarted during a batch.
 * Redis is a private server started by this test (on its own port), so restarting it
 * disturbs no other test. The fleet recovers; no message is lost or stored twice and no
 * tool runs twice.
 */
import type { ChildProcess } from "node:child_process";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { databaseName } from "../src/shared/db/client.js";
import type { RunningSweeper } from "../src/sweeper/sweeper-process.js";
import { type FleetEnv, waitFor } from "./support/fleet-env.js";
import { startRedis, stopRedis } from "./support/private-redis.js";
import { startPrivateRedisFleet } from "./support/private-redis-fleet.js";

describe("Postgres connections dropped and Redis restarted during a batch", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let sweeper: RunningSweeper;
  let redis: ChildProcess;
  let port: number;

  beforeAll(async () => {
    ({ port, redis, fleet, client, sweeper } = await startPrivateRedisFleet("infra"));
  });
  afterAll(async () => {
    await sweeper?.stop();
    await fleet?.close();
    if (redis) await stopRedis(redis);
  });

  it("recovers every session with no message lost or duplicated", async () => {
    await Promise.all([fleet.spawnWorker(), fleet.spawnWorker()]);
    const ids: string[] = [];
    const count = 20;
    for (let i = 0; i < count; i++) {
      const { id } = await client.createSession({
        agent: {
          model: {
            provider: "scripted",
            steps: [
              {
                toolCalls: [
                  { id: "log", name: "append_file", arguments: { path: `infra-${i}.txt`, line: "ran" } },
                ],
              },
              { toolCalls: [{ id: "nap", name: "sleep", arguments: { ms: 400 } }], delayMs: 100 },
              { toolCalls: [{ id: "nap2", name: "sleep", arguments: { ms: 400 } }], delayMs: 100 },
              { text: "done", delayMs: 50 },
            ],
          },
          tools: ["append_file", "sleep"],
        },
      });
      ids.push(id);
      await client.send(id, `session ${i}`);
    }
    const { sql } = fleet.database;
    const admin = postgres("postgres://postgres@127.0.0.1:5432/postgres", { max: 1, onnotice: () => {} });
    try {
      await new Promise((r) => setTimeout(r, 600));
      const dropped = await admin<{ n: number }[]>`
        select count(*)::int as n from (
          select pg_terminate_backend(pid) from pg_stat_activity
           where datname = ${databaseName(fleet.config.databaseUrl)} and pid <> pg_backend_pid()) t`;
      console.log(`terminated ${dropped[0]!.n} Postgres connections`);
      expect(dropped[0]!.n).toBeGreaterThan(0);

      await new Promise((r) => setTimeout(r, 500));
      await stopRedis(redis);
      await new Promise((r) => setTimeout(r, 500));
      redis = await startRedis(port);
      console.log("Redis restarted (empty: every queue, job and lease was lost)");
    } finally {
      await admin.end();
    }

    const completed = async () =>
      (
        await sql<
          { n: number }[]
        >`select count(*)::int as n from sessions where tail_state = 'completed'`.catch(() => [{ n: -1 }])
      )[0]!.n;
    await waitFor(async () => (await completed()) === count, 45_000, "every session completed").catch(
      async (error) => {
        console.log(
          await sql`select s.tail_state, s.status, count(*) from sessions s group by 1, 2`,
          await sql`select kind, trigger, status, ended_reason, count(*) from runs group by 1, 2, 3, 4 order by 1, 2`,
        );
        throw error;
      },
    );

    for (const [i, id] of ids.entries()) {
      const session = await client.getSession(id);
      expect(session.messages.map((m) => m.seq)).toEqual(session.messages.map((_, n) => n + 1));
      expect(session.messages.filter((m) => m.role === "user")).toHaveLength(1);
      const answered = session.messages.flatMap((m) => (m.role === "tool" ? [m.toolCallId] : []));
      expect(new Set(answered).size).toBe(answered.length);
      expect(answered).toContain("log");
      expect(session.messages.at(-1)).toMatchObject({
        role: "assistant",
        content: "done",
        stopReason: "end_turn",
      });
      // append_file ran exactly once, whatever was interrupted around it.
      expect(await readFile(join(fleet.config.toolDir, `infra-${i}.txt`), "utf8")).toBe("ran\n");
    }
    const outcomes = await sql<{ ended_reason: string; n: number }[]>`
      select ended_reason, count(*)::int as n from runs group by 1 order by 1`;
    console.log("runs by outcome:", Object.fromEntries(outcomes.map((r) => [r.ended_reason, r.n])));
  }, 90_000);
});
