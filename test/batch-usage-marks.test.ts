/**
 * A batch's usage (`GET /v1/batches/:id?include=usage`) and the usage on its result lines
 * (`GET /v1/batches/:id/results`) are summed from each session's usage mark and the steps after
 * it (store/session-usage.ts), as a session's own usage is: a batch of long sessions read again
 * reads its steps once, not at every read. Counted in index entries of `messages` read
 * (Postgres's statistics), and checked equal to the sums over every step.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openDatabase } from "../src/shared/db/client.js";
import { zeroTotals } from "../src/shared/prices.js";
import { BatchStore } from "../src/shared/store/batches.js";
import { MARK_AFTER_STEPS } from "../src/shared/store/session-usage.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { messageIndexReads } from "./support/stat-reads.js";
import { appendSteps, expectedUsage, markOf } from "./support/usage-steps.js";

/** Ten sessions of 2,000 messages each (1,000 model steps), and one with none. */
const SESSIONS = 10;
const MESSAGES = 2_000;

let fleet: FleetEnv;
let db: ReturnType<typeof openDatabase>;
let store: BatchStore;
beforeAll(async () => {
  fleet = await createFleetEnv("batch-usage-marks");
  db = openDatabase(fleet.config.databaseUrl, { max: 1 });
  store = new BatchStore(db);
}, 60_000);
afterAll(async () => {
  await db?.close();
  await fleet?.close();
});

/** The sums of several sessions' steps made by appendSteps up to each `last`. */
function sumOf(lasts: readonly number[]) {
  const total = zeroTotals();
  for (const last of lasts) {
    const one = expectedUsage(last);
    for (const key of Object.keys(total) as (keyof typeof total)[]) total[key] += one[key];
  }
  total.costUsd = Math.round(total.costUsd * 1_000_000) / 1_000_000;
  return total;
}

async function batchOf(id: string, sessions: number): Promise<string[]> {
  const { sql } = fleet.database;
  await sql`insert into batches (id, tenant, open) values (${id}, 'default', false)`;
  const ids = Array.from({ length: sessions }, (_, i) => `${id}-s${String(i).padStart(2, "0")}`);
  await sql`insert into sessions (id, agent, batch_id, run_started, tail_state)
    select i, '{"model":{"provider":"scripted","steps":[{"text":"hi"}]}}'::jsonb, ${id}, true, 'completed'
      from jsonb_array_elements_text(${JSON.stringify(ids)}::jsonb) i`;
  return ids;
}

async function allResults(batch: string) {
  const results = [];
  for (let after = ""; ; ) {
    const page = await store.resultsPage(batch, after, 4);
    results.push(...page);
    if (page.length < 4) return results;
    after = page.at(-1)!.id;
  }
}

describe("a batch of long sessions", () => {
  it("sums its usage from the sessions' marks, equal to the sums over every step", async () => {
    const ids = await batchOf("bu", SESSIONS + 1);
    const lasts = ids.map(() => 0);
    for (let i = 0; i < SESSIONS; i++) lasts[i] = await appendSteps(fleet.database, ids[i]!, 0, MESSAGES);

    const first = await messageIndexReads(db, async () =>
      expect(await store.usage("bu")).toEqual(sumOf(lasts)),
    );
    expect(first.index).toBeGreaterThanOrEqual(SESSIONS * MESSAGES);
    for (let i = 0; i < SESSIONS; i++) expect(await markOf(fleet.database, ids[i]!)).toBe(MESSAGES);
    expect(await markOf(fleet.database, ids[SESSIONS]!)).toBeNull();

    // Read again: the marks and no step (before: every step of the batch again, 20,000 entries).
    const again = await messageIndexReads(db, async () =>
      expect(await store.usage("bu")).toEqual(sumOf(lasts)),
    );
    expect(again.index).toBeLessThan(10 * SESSIONS);

    // A few new steps of one session are added to its mark without moving it; many move it.
    lasts[0] = await appendSteps(fleet.database, ids[0]!, lasts[0]!, 20);
    const few = await messageIndexReads(db, async () =>
      expect(await store.usage("bu")).toEqual(sumOf(lasts)),
    );
    expect(few.index).toBeLessThan(10 * SESSIONS + 40);
    expect(await markOf(fleet.database, ids[0]!)).toBe(MESSAGES);
    lasts[1] = await appendSteps(fleet.database, ids[1]!, lasts[1]!, 2 * MARK_AFTER_STEPS);
    expect(await store.usage("bu")).toEqual(sumOf(lasts));
    expect(await markOf(fleet.database, ids[1]!)).toBe(lasts[1]);
  }, 120_000);

  it("gives each result line its session's usage from its mark", async () => {
    const ids = await batchOf("br", SESSIONS + 1);
    const lasts = ids.map(() => 0);
    for (let i = 0; i < SESSIONS; i++) lasts[i] = await appendSteps(fleet.database, ids[i]!, 0, MESSAGES);
    const expected = ids.map((id, i) => ({ id, usage: expectedUsage(lasts[i]!) }));
    // Statistics as autovacuum keeps them: without any, a line's output (its session's last
    // step) is planned as a sort of all the session's messages, not the last index entries.
    await fleet.database.sql`analyze messages`;

    const first = await messageIndexReads(db, async () =>
      expect((await allResults("br")).map(({ id, usage }) => ({ id, usage }))).toEqual(expected),
    );
    expect(first.index).toBeGreaterThanOrEqual(SESSIONS * MESSAGES);
    for (let i = 0; i < SESSIONS; i++) expect(await markOf(fleet.database, ids[i]!)).toBe(MESSAGES);

    // Read again: each line's output (one entry) and its mark, no step summed again.
    const again = await messageIndexReads(db, async () =>
      expect((await allResults("br")).map(({ id, usage }) => ({ id, usage }))).toEqual(expected),
    );
    expect(again.index).toBeLessThan(10 * SESSIONS);

    // The batch's usage then reads no step either: the result lines moved the same marks.
    const usage = await messageIndexReads(db, async () =>
      expect(await store.usage("br")).toEqual(sumOf(lasts)),
    );
    expect(usage.index).toBeLessThan(10 * SESSIONS);
  }, 120_000);
});
