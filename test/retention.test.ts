/**
 * Retention (FLEET_RETENTION_DAYS) against real Postgres and Redis: off by default; sessions
 * nothing will act on, idle past the limit, are deleted in chunks of FLEET_RETENTION_CHUNK —
 * never one that a worker holds (skipped, not waited for), never one in the sweeper's
 * attention set or with a run queued — and batches ended past the limit go with all their
 * sessions. Two sweepers run the passes at once: every row is deleted exactly once.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { loadConfig } from "../src/shared/config.js";
import { DeletionCleanup } from "../src/shared/deletion-cleanup.js";
import type { Message } from "../src/shared/messages.js";
import { createMetrics } from "../src/shared/metrics.js";
import { DataDeletion } from "../src/shared/store/data-deletion.js";
import { MAX_CHUNKS_PER_PASS, Retention } from "../src/sweeper/retention.js";
import { type RunningSweeper, startSweeper } from "../src/sweeper/sweeper-process.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "done" }] } };
const COMPLETED: Message[] = [
  { role: "user", content: "hi" },
  { role: "assistant", content: "hello", stopReason: "end_turn" },
];
const OPEN: Message[] = [
  { role: "user", content: "hi" },
  {
    role: "assistant",
    content: "",
    stopReason: "tool_use",
    toolCalls: [{ id: "t", name: "sleep", arguments: { ms: 1 } }],
  },
];
const DAY_MS = 86_400_000;

describe("retention", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  const sweepers: RunningSweeper[] = [];

  beforeAll(async () => {
    fleet = await createFleetEnv("retention");
    ({ client } = await fleet.startApi());
  }, 60_000);
  afterAll(async () => {
    for (const s of sweepers) await s.stop();
    await fleet?.close();
  });

  const age = async (ids: string[], days: number) => {
    const { sql } = fleet.database;
    await sql`update sessions set updated_at = now() - ${days} * interval '1 day' where id in ${sql(ids)}`;
  };
  const existing = async (ids: string[]) => {
    const { sql } = fleet.database;
    const rows = await sql<{ id: string }[]>`select id from sessions where id in ${sql(ids)}`;
    return new Set(rows.map((r) => r.id));
  };
  const imported = async (n: number, messages = COMPLETED) => {
    const ids: string[] = [];
    for (let i = 0; i < n; i++) ids.push((await client.createSession({ agent: AGENT, messages })).id);
    return ids;
  };
  const retentionOf = (maxIdleMs: number | null, chunk: number) => {
    const store = new DataDeletion(fleet.database);
    const metrics = createMetrics("test");
    const cleanup = new DeletionCleanup({
      redis: fleet.redis,
      prefix: fleet.config.prefix,
      removeJob: async () => {},
      metrics,
      eventsEnabled: true,
    });
    return {
      store,
      metrics,
      retention: new Retention({ store, cleanup, settings: { maxIdleMs, chunk }, log: console, metrics }),
    };
  };

  it("is off by default: nothing is deleted, however old", async () => {
    expect(loadConfig(fleet.env).retention.maxIdleMs).toBeNull();
    const ids = await imported(3);
    await age(ids, 400);
    const { retention } = retentionOf(loadConfig(fleet.env).retention.maxIdleMs, 200);
    expect(await retention.pass()).toEqual({ sessionsDeleted: 0, batchesDeleted: 0, moreLeft: false });
    expect((await existing(ids)).size).toBe(3);
    await fleet.database.sql`delete from sessions where id in ${fleet.database.sql(ids)}`;
  });

  it("counts a pass that reached its limit with more to delete as more_left, then caught_up", async () => {
    const ids = await imported(MAX_CHUNKS_PER_PASS + 1);
    await age(ids, 10);
    const { retention, metrics } = retentionOf(DAY_MS, 1);
    const passes = async () =>
      Object.fromEntries((await metrics.retentionPasses.get()).values.map((v) => [v.labels.result, v.value]));
    expect(await passes()).toEqual({ caught_up: 0, more_left: 0 });
    expect(await retention.pass()).toMatchObject({ sessionsDeleted: MAX_CHUNKS_PER_PASS, moreLeft: true });
    expect(await passes()).toEqual({ caught_up: 0, more_left: 1 });
    expect(await retention.pass()).toMatchObject({ sessionsDeleted: 1, moreLeft: false });
    expect(await passes()).toEqual({ caught_up: 1, more_left: 1 });
    expect((await existing(ids)).size).toBe(0);
  });

  it("deletes at most a chunk per statement, and skips (does not wait for) a row a worker holds", async () => {
    const ids = await imported(6);
    await age(ids, 10);
    const { store } = retentionOf(DAY_MS, 4);
    const { sql } = fleet.database;
    let release: () => void = () => {};
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    let locked: () => void = () => {};
    const isLocked = new Promise<void>((resolve) => {
      locked = resolve;
    });
    // A worker's claim holds its session's row (grouped-claims.ts: `for update`).
    const holder = sql.begin(async (tx) => {
      await tx`select id from sessions where id = ${ids[0]!} for update`;
      locked();
      await held;
    });
    await isLocked;
    // A chunk that waited for the row would wait as long as the claim holds it (here: until
    // released below). Postgres says when a statement waits for a lock: that is a failure, at once.
    const notBlocked = async <T>(work: Promise<T>): Promise<T> => {
      let done = false;
      const watch = (async () => {
        while (!done) {
          const waiting = await sql`
            select 1 from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`;
          if (waiting.length > 0) return { blocked: true as const };
          await new Promise((r) => setTimeout(r, 10));
        }
        return { blocked: false as const };
      })();
      const outcome = await Promise.race([work.then((value) => ({ value })), watch]);
      done = true;
      await watch;
      if ("blocked" in outcome) throw new Error("the chunk waited for the held row's lock");
      return outcome.value;
    };
    let first: Awaited<ReturnType<typeof store.expireSessions>>;
    let second: typeof first;
    try {
      first = await notBlocked(store.expireSessions(DAY_MS, 4));
      second = await notBlocked(store.expireSessions(DAY_MS, 4));
    } finally {
      release();
      await holder;
    }
    expect(first.sessionIds).toHaveLength(4);
    expect(second.sessionIds).toHaveLength(1);
    expect([...first.sessionIds, ...second.sessionIds]).not.toContain(ids[0]);
    // Released, it goes with the next chunk.
    expect((await store.expireSessions(DAY_MS, 4)).sessionIds).toEqual([ids[0]]);
    expect((await existing(ids)).size).toBe(0);
  });

  it("two sweepers delete every expired session and batch exactly once, and nothing else", async () => {
    const { sql } = fleet.database;
    const expired = await imported(37);
    const parked = await imported(1);
    await sql`update sessions set status = 'parked', parked_reason = 'attempts_exhausted' where id = ${parked[0]!}`;
    const recent = await imported(5);
    // An old session the sweeper still has to resume (run started, open tail): kept.
    const attention = await imported(1, OPEN);
    await sql`update sessions set run_started = true, next_resume_at = now() + interval '1 day' where id = ${attention[0]!}`;
    // An old completed session that was sent a message (its run waits in the queue): kept.
    const queued = await imported(1);
    await client.send(queued[0]!, "more");
    await age([...expired, ...parked, ...attention, ...queued], 10);
    // A batch that ended 10 days ago (its 3 sessions were never run) and one that has not ended.
    const old = await client.createBatch([{ agent: AGENT }, { agent: AGENT }, { agent: AGENT }]);
    expect((await client.getBatch(old.id)).status).toBe("ended");
    await sql`update batches set ended_at = now() - interval '10 days' where id = ${old.id}`;
    const running = await client.createBatch([{ agent: AGENT, input: "go" }]);
    await sql`update batches set created_at = now() - interval '10 days' where id = ${running.id}`;
    const oldSessions = old.sessions.map((s) => s.id);
    await age(oldSessions, 10);

    const env = {
      ...fleet.env,
      FLEET_RETENTION_DAYS: "1",
      FLEET_RETENTION_CHUNK: "4",
      FLEET_RETENTION_INTERVAL_MS: "50",
    };
    for (let i = 0; i < 2; i++)
      sweepers.push(await startSweeper({ ...loadConfig(env), logLevel: "silent" }, { serveMetrics: false }));
    const gone = [...expired, ...parked, ...oldSessions];
    await waitFor(async () => (await existing(gone)).size === 0, 30_000, "expired sessions deleted");
    await waitFor(
      async () => (await sql`select 1 from batches where id = ${old.id}`).length === 0,
      10_000,
      "the expired batch's row deleted",
    );
    // A few more passes of both: nothing else goes.
    await new Promise((r) => setTimeout(r, 1_000));
    const kept = [...recent, ...attention, ...queued, running.sessions[0]!.id];
    expect(await existing(kept)).toEqual(new Set(kept));
    expect(await client.getBatch(running.id)).toMatchObject({ id: running.id });
    const counted = await Promise.all(
      sweepers.map(async (s) => {
        const values = (await s.metrics.sessionsDeleted.get()).values;
        return values.find((v) => v.labels.trigger === "retention")?.value ?? 0;
      }),
    );
    // Each deleted once: the two sweepers' counts add up to exactly what went.
    expect(counted.reduce((x, y) => x + y, 0)).toBe(gone.length);
    console.log(`retention: ${gone.length} sessions deleted by two sweepers (${counted.join(" + ")})`);
  }, 60_000);
});
