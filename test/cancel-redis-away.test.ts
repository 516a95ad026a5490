/**
 * A cancel answered while Redis is away (a restart, a failover): the API commits it in Postgres
 * and answers 202, but its signal to the workers (worker-signals.ts `cancelChannel`, a Redis
 * publish) is lost, and so is any published while a worker's subscriber reconnects. Before,
 * nothing sent it again: the runs the cancel found running went on — a 20 s tool ran to its
 * end and its ordinary result was stored, then the model was called again — where contracts
 * §9 says a running run is aborted, its running tool answered "cancelled while running". Only
 * the next tool's start was refused. Now the sweeper sends the signal again, for the runs a
 * cancel found running that still run a moment after it (cancelled-leftovers.ts), once Redis
 * answers: they are aborted as on a delivered cancel.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CANCELLED_WHILE_RUNNING_PREFIX } from "../src/shared/resume-plan.js";
import { waitFor } from "./support/fleet-env.js";
import { startRedis, stopRedis } from "./support/private-redis.js";
import { type PrivateRedisFleet, startPrivateRedisFleet } from "./support/private-redis-fleet.js";

const agent = (i: number) => ({
  model: {
    provider: "scripted" as const,
    steps: [
      { toolCalls: [{ id: "nap", name: "sleep", arguments: { ms: 20_000 } }] },
      {
        toolCalls: [{ id: "after", name: "append_file", arguments: { path: `after-${i}.txt`, line: "ran" } }],
      },
      { text: "done" },
    ],
  },
  tools: ["sleep", "append_file"],
});

describe("a cancel answered while Redis is away", () => {
  let f: PrivateRedisFleet;

  beforeAll(async () => {
    f = await startPrivateRedisFleet("cancelredisaway");
    await f.fleet.spawnWorker();
  }, 90_000);
  afterAll(async () => {
    await f?.sweeper.stop();
    await f?.fleet.close();
    if (f?.redis) await stopRedis(f.redis);
  });

  it("aborts the runs it found running once Redis answers: the tool answered cancelled, nothing after it", async () => {
    const { client, fleet } = f;
    const { sql } = fleet.database;
    const batch = await client.createBatch([
      { agent: agent(0), input: "a" },
      { agent: agent(1), input: "b" },
    ]);
    const ids = batch.sessions.map((s) => s.id);
    // Both inside their 20 s sleep: the step asking for it is stored, and so is the run's start.
    await waitFor(
      async () => {
        const [row] = await sql<{ n: number }[]>`select count(*)::int as n from messages
          where session_id in ${sql(ids)} and role = 'assistant'`;
        return row!.n === 2;
      },
      30_000,
      "both sessions inside their tool",
    );
    await stopRedis(f.redis);
    const answer = await fetch(`${f.api.url}/v1/batches/${batch.id}/cancel`, { method: "POST" });
    expect(answer.status).toBe(202);
    f.redis = await startRedis(f.port); // empty, as a restart without persistence leaves it
    await waitFor(
      async () => {
        const [row] = await sql<{ n: number }[]>`select count(*)::int as n from runs
          where session_id in ${sql(ids)} and status = 'ended'`;
        return row!.n === 2;
      },
      40_000,
      "both runs ended",
    );
    const runs = await sql<
      { ended_reason: string }[]
    >`select ended_reason from runs where session_id in ${sql(ids)}`;
    expect(runs.map((r) => r.ended_reason)).toEqual(["cancelled", "cancelled"]);
    for (const [i, id] of ids.entries()) {
      const { status, messages } = await client.getSession(id);
      expect(status).toBe("cancelled");
      // The running tool answered as cancelled, and the run's last message: no model call after it.
      expect(messages.map((m) => m.role)).toEqual(["user", "assistant", "tool"]);
      expect(String(messages[2]!.content)).toMatch(new RegExp(`^${CANCELLED_WHILE_RUNNING_PREFIX}`));
      expect(existsSync(join(fleet.config.toolDir, `after-${i}.txt`))).toBe(false);
    }
  }, 90_000);
});
