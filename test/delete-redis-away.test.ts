/**
 * A delete answered while Redis is away (a restart that keeps its data, a failover to a
 * replica, a blip shorter than the lease TTL): the API deletes the session in Postgres and
 * answers, but its signal to the workers (the cancel channel, a Redis publish) is lost. The
 * lease survives the outage, so nothing else tells the worker: before, a worker running a tool
 * for a deleted session ran it to its end (a 10-minute sleep here, its lease renewed all along)
 * — only its next write was refused. The runs' rows are gone with the session, so the sweeper
 * had nothing to send the signal again from (a cancel's it does: cancel-redis-away.test.ts).
 * Now the delete keeps the runs it found running (`deleted_runs`), and the sweeper sends their
 * stop again while their session's lease is held: the tool is aborted once Redis answers,
 * nothing after it runs, and the worker releases the lease.
 */
import { existsSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SessionLease } from "../src/shared/lease.js";
import { waitFor } from "./support/fleet-env.js";
import { startRedis, stopRedis } from "./support/private-redis.js";
import { type PrivateRedisFleet, startPrivateRedisFleet } from "./support/private-redis-fleet.js";

const agent = (name: string) => ({
  model: {
    provider: "scripted" as const,
    steps: [
      { toolCalls: [{ id: "nap", name: "sleep", arguments: { ms: 600_000 } }] },
      { toolCalls: [{ id: "after", name: "append_file", arguments: { path: `${name}.txt`, line: "ran" } }] },
      { text: "done" },
    ],
  },
  tools: ["sleep", "append_file"],
});

/** The lease outlives the test's outage: only the delete's signal can stop the worker. */
const LEASE_TTL_MS = 60_000;

describe("a delete answered while Redis is away", () => {
  let f: PrivateRedisFleet;
  let persisted: string[];

  beforeAll(async () => {
    // Every write on disk at once: a restart (even a SIGKILL) keeps the leases.
    persisted = [
      "--appendonly",
      "yes",
      "--appendfsync",
      "always",
      "--dir",
      mkdtempSync(join(tmpdir(), "aof-")),
    ];
    f = await startPrivateRedisFleet("deleteredisaway", persisted);
    await f.fleet.spawnWorker({ LEASE_TTL_MS: String(LEASE_TTL_MS), WORKER_CONCURRENCY: "4" });
  }, 90_000);
  afterAll(async () => {
    await f?.sweeper.stop();
    await f?.fleet.close();
    if (f?.redis) await stopRedis(f.redis);
  });

  /** Waits until every one of `ids` is inside its 10-minute sleep (the step asking for it stored). */
  async function insideTheirTool(ids: string[]): Promise<void> {
    const { sql } = f.fleet.database;
    await waitFor(
      async () => {
        const [row] = await sql<{ n: number }[]>`select count(*)::int as n from messages
          where session_id in ${sql(ids)} and role = 'assistant'`;
        return row!.n === ids.length;
      },
      30_000,
      "every session inside its tool",
    );
  }

  /** Deletes `path` with Redis stopped, then starts it again with its data. */
  async function deleteWhileRedisAway(path: string): Promise<void> {
    await stopRedis(f.redis);
    const answer = await fetch(`${f.api.url}${path}`, { method: "DELETE" });
    expect(answer.status).toBe(200);
    f.redis = await startRedis(f.port, persisted);
  }

  /** Waits until no worker holds the lease of any of `ids` (their jobs ended). */
  async function leasesReleased(ids: string[], what: string): Promise<void> {
    const lease = new SessionLease(f.fleet.redis, f.fleet.config.prefix, LEASE_TTL_MS);
    // The outage kept them: the worker held them when Redis came back.
    await waitFor(async () => (await lease.holders(ids)).some((h) => h !== null), 20_000, "leases back");
    await waitFor(
      async () => (await lease.holders(ids)).every((h) => h === null),
      40_000,
      `${what}: the worker stopped (leases released), its 10-minute tool aborted`,
    );
  }

  it("of a session: its running tool is aborted once Redis answers, nothing after it runs", async () => {
    const { id } = await f.client.createSession({ agent: agent("single") });
    await f.client.send(id, "go");
    await insideTheirTool([id]);
    await deleteWhileRedisAway(`/v1/sessions/${id}`);
    await leasesReleased([id], "a deleted session");
    expect(existsSync(join(f.fleet.config.toolDir, "single.txt"))).toBe(false);
    const { sql } = f.fleet.database;
    await waitFor(
      async () => (await sql`select 1 from deleted_runs where session_id = ${id}`).length === 0,
      30_000,
      "the record of its run forgotten once its lease was released",
    );
  }, 120_000);

  it("of a batch: every running session's tool is aborted once Redis answers", async () => {
    const batch = await f.client.createBatch(
      [0, 1, 2].map((i) => ({ agent: agent(`batch-${i}`), input: "go" })),
    );
    const ids = batch.sessions.map((s) => s.id);
    await insideTheirTool(ids);
    await deleteWhileRedisAway(`/v1/batches/${batch.id}`);
    await leasesReleased(ids, "a deleted batch");
    for (const i of [0, 1, 2]) expect(existsSync(join(f.fleet.config.toolDir, `batch-${i}.txt`))).toBe(false);
  }, 120_000);
});
