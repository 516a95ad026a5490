/**
 * The batch events one reader derives from Postgres (src/producer/batch-event-sync.ts), with
 * a small fake store: a full read first and every FULL_PASS_MS, only what changed in between
 * (from the previous pass's start on Postgres's clock, less OVERLAP_MS), pages followed to
 * the end, and BATCH_COMPLETED once, with the counts read only then. The real statements:
 * test/events-api.test.ts (batch streams) and test/batch-api.test.ts.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BatchEventSync, FULL_PASS_MS, OVERLAP_MS } from "../src/producer/batch-event-sync.js";
import type { FleetClient } from "../src/producer/client.js";
import { type BatchJson, BatchStore, type EndedSession } from "../src/shared/store/batches.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const T0 = Date.parse("2026-12-02T10:00:00Z");

function fakeStore(sessions: EndedSession[]) {
  const calls: string[] = [];
  let dbNow = T0;
  let ended = false;
  const view: BatchJson = {
    id: "b1",
    status: "ended",
    counts: { total: 3, queued: 0, running: 0, completed: 2, parked: 1, cancelled: 0 },
    createdAt: new Date(T0).toISOString(),
    open: false,
  } as BatchJson;
  const batches = {
    async clock() {
      calls.push("clock");
      return new Date(dbNow);
    },
    async hasEnded() {
      calls.push("hasEnded");
      return ended;
    },
    async endedPage(_id: string, after: { micros: string; id: string } | null, limit: number, since?: Date) {
      calls.push(`page after=${after?.id ?? "-"} since=${since ? since.getTime() - T0 : "all"}`);
      const rows = sessions.filter((s) => s.id > (after?.id ?? "")).slice(0, limit);
      const last = rows.at(-1);
      return { next: rows.length === limit && last ? { micros: "0", id: last.id } : null, ended: rows };
    },
    async view() {
      calls.push("view");
      return view;
    },
  };
  return {
    batches,
    calls,
    setDbNow: (ms: number) => {
      dbNow = ms;
    },
    setEnded: (value: boolean) => {
      ended = value;
    },
  };
}

describe("BatchEventSync", () => {
  it("reads the whole batch first, then only what changed, and the whole batch again every FULL_PASS_MS", async () => {
    const store = fakeStore([
      { id: "s1", customId: "a", status: "completed" },
      { id: "s2", customId: null, status: "parked", parkedReason: "provider_rejected: 401" },
    ]);
    const written: unknown[][] = [];
    let now = 1_000_000;
    const sync = new BatchEventSync(
      { batches: store.batches, write: async (entries) => void written.push(entries), now: () => now },
      "b1",
      "tenant",
    );
    await sync.sync();
    expect(store.calls).toEqual(["clock", "hasEnded", "page after=- since=all"]);
    expect(written[0]).toEqual([
      [
        "s1",
        "SESSION_ENDED",
        { type: "SESSION_ENDED", batchId: "b1", sessionId: "s1", customId: "a", status: "completed" },
      ],
      [
        "s2",
        "SESSION_ENDED",
        {
          type: "SESSION_ENDED",
          batchId: "b1",
          sessionId: "s2",
          customId: null,
          status: "parked",
          parkedReason: "provider_rejected: 401",
        },
      ],
    ]);

    store.calls.length = 0;
    now += 1_000;
    store.setDbNow(T0 + 1_000);
    await sync.sync();
    // Since the first pass began (Postgres's clock), less the overlap.
    expect(store.calls).toEqual(["clock", "hasEnded", `page after=- since=${-OVERLAP_MS}`]);

    store.calls.length = 0;
    now += FULL_PASS_MS;
    store.setDbNow(T0 + 2_000);
    await sync.sync();
    expect(store.calls).toEqual(["clock", "hasEnded", "page after=- since=all"]);
  });

  it("follows pages to the end", async () => {
    const sessions = Array.from({ length: 2_500 }, (_, i) => ({
      id: `s${String(i).padStart(5, "0")}`,
      customId: null,
      status: "completed" as const,
    }));
    const store = fakeStore(sessions);
    let count = 0;
    const sync = new BatchEventSync(
      {
        batches: store.batches,
        write: async (entries) => {
          count += entries.length;
        },
      },
      "b1",
      "tenant",
    );
    await sync.sync();
    expect(count).toBe(2_500);
    expect(store.calls.filter((c) => c.startsWith("page"))).toEqual([
      "page after=- since=all",
      "page after=s00999 since=all",
      "page after=s01999 since=all",
    ]);
  });

  it("writes BATCH_COMPLETED once the batch has ended, reading its counts only then, and never again", async () => {
    const store = fakeStore([{ id: "s1", customId: null, status: "completed" }]);
    const types: string[] = [];
    const sync = new BatchEventSync(
      { batches: store.batches, write: async (entries) => void types.push(...entries.map((e) => e[1])) },
      "b1",
      "tenant",
    );
    await sync.sync();
    expect(store.calls).not.toContain("view");
    store.setEnded(true);
    await sync.sync();
    expect(store.calls.filter((c) => c === "view")).toHaveLength(1);
    expect(types).toEqual(["SESSION_ENDED", "SESSION_ENDED", "BATCH_COMPLETED"]);
    store.calls.length = 0;
    await sync.sync();
    expect(store.calls).toEqual(["clock", expect.stringMatching(/^page /)]);
  });
});

describe("BatchEventSync on Postgres", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  beforeAll(async () => {
    fleet = await createFleetEnv("batchsync");
    ({ client } = await fleet.startApi());
  });
  afterAll(() => fleet?.close());

  it("an incremental pass sees what ended since the last one; a change older than the overlap waits for the full pass", async () => {
    const { sql } = fleet.database;
    const agent = { model: { provider: "scripted" as const, steps: [{ text: "hi" }] } };
    const batch = await client.createBatch(
      Array.from({ length: 4 }, (_, i) => ({ agent, input: "go", customId: `k${i}` })),
    );
    const [s0, s1, s2] = batch.sessions.map((s) => s.id);
    /** What a run's end does to the rows: the run ended, the session's tail completed, `updated_at` now (or `at`). */
    const complete = async (id: string, at = sql`now()`) => {
      await sql`update runs set status = 'ended', ended_reason = 'completed', ended_at = now() where session_id = ${id}`;
      await sql`update sessions set run_started = true, tail_state = 'completed', updated_at = ${at} where id = ${id}`;
    };
    // The stream's script writes each session's SESSION_ENDED once; passes may name one again.
    const ended = new Set<string>();
    let now = 1_000_000;
    const sync = new BatchEventSync(
      {
        batches: new BatchStore(fleet.database),
        write: async (entries) => {
          for (const [member, type] of entries) if (type === "SESSION_ENDED") ended.add(member);
        },
        now: () => now,
      },
      batch.id,
      "default",
    );
    await complete(s0!);
    await sync.sync(); // full
    expect([...ended]).toEqual([s0]);

    now += 1_000;
    await complete(s1!);
    // As if committed by a transaction that began a minute ago: older than the overlap.
    await complete(s2!, sql`now() - interval '1 minute'`);
    await sync.sync(); // incremental
    expect([...ended].sort()).toEqual([s0, s1].sort());

    now += FULL_PASS_MS;
    await sync.sync(); // full: s2 too
    expect([...ended].sort()).toEqual([s0, s1, s2].sort());
  });

  it("a batch seen ended by an incremental pass gets every SESSION_ENDED before its BATCH_COMPLETED", async () => {
    const { sql } = fleet.database;
    const agent = { model: { provider: "scripted" as const, steps: [{ text: "hi" }] } };
    const batch = await client.createBatch([
      { agent, input: "go", customId: "first" },
      { agent, input: "go", customId: "last" },
    ]);
    const [first, last] = batch.sessions.map((s) => s.id);
    const complete = async (id: string, at = sql`now()`) => {
      await sql`update runs set status = 'ended', ended_reason = 'completed', ended_at = now() where session_id = ${id}`;
      await sql`update sessions set run_started = true, tail_state = 'completed', updated_at = ${at} where id = ${id}`;
    };
    // What the stream gets, in order (its script writes each member once).
    const members = new Set<string>();
    const written: string[] = [];
    let now = 1_000_000;
    const sync = new BatchEventSync(
      {
        batches: new BatchStore(fleet.database),
        write: async (entries) => {
          for (const [member, type] of entries)
            if (!members.has(member)) {
              members.add(member);
              written.push(type === "SESSION_ENDED" ? member : type);
            }
        },
        now: () => now,
      },
      batch.id,
      "default",
    );
    await complete(first!);
    await sync.sync(); // full
    now += 1_000;
    // The batch's last session ends in a transaction that began before the overlap: the batch
    // has ended, and this pass is incremental.
    await complete(last!, sql`now() - interval '1 minute'`);
    await sync.sync();
    // Before: [first, "BATCH_COMPLETED"], and `last`'s SESSION_ENDED only at the next full
    // pass, after the BATCH_COMPLETED a client's batchEvents() stops at: that end was lost to it.
    expect(written).toEqual([first, last, "BATCH_COMPLETED"]);
  });
});
