/**
 * A batch's results (`fleet batch results`, GET /v1/batches/:id/results) read each page's runs
 * in one statement node over the page's session ids. Before, two subqueries per session each
 * probed `runs` (whether a run is running or queued, and when its last run ended): 2 index
 * scans per session, 5,000 for a batch of 2,500. What is checked: Postgres's counts of index
 * scans and of rows and index entries read in `runs`, and the results themselves.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { zeroTotals } from "../src/shared/prices.js";
import { BatchStore } from "../src/shared/store/batches.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { readsWhile } from "./support/stat-reads.js";

/** Sessions of the batch: two pages of 500 and a part of a third. */
const N = 1_200;
const PAGE = 500;

let fleet: FleetEnv;
beforeAll(async () => {
  fleet = await createFleetEnv("batchresultsreads");
});
afterAll(async () => {
  await fleet?.close();
});

it("reads `runs` by the page's ids in one read, not twice per session, with the same results", async () => {
  const { sql } = fleet.database;
  await sql`insert into batches (id, tenant, open) values ('b', 'default', false)`;
  // Sessions by i % 4: 0 running, 1 queued, 2 completed, 3 parked; each with an earlier run
  // that ended at T0 + i s, and the completed and parked ones a later one at T1 + i s.
  await sql`insert into sessions (id, custom_id, agent, batch_id, run_started, tail_state, status, parked_reason)
    select 's-' || lpad(g::text, 5, '0'), 'c-' || g, '{"model":{"provider":"scripted","steps":[{"text":"hi"}]}}'::jsonb,
           'b', true, case when g % 4 = 2 then 'completed' else 'user' end,
           case when g % 4 = 3 then 'parked' else 'active' end, case when g % 4 = 3 then 'max_resumes' end
      from generate_series(1, ${N}) g`;
  // Runs carry their session's batch, as the fleet inserts them (migration 0017; one inserted
  // without it gets it from a trigger's update, a second version of the row).
  await sql`insert into runs (id, session_id, batch_id, kind, trigger, status, input, created_at, ended_at, ended_reason)
    select 'r0-' || g, 's-' || lpad(g::text, 5, '0'), 'b', 'run', 'api', 'ended', 'Go.',
           '2026-01-01T00:00:00Z'::timestamptz, '2026-01-01T00:00:00Z'::timestamptz + g * interval '1 second', 'completed'
      from generate_series(1, ${N}) g`;
  await sql`insert into runs (id, session_id, batch_id, kind, trigger, status, input, created_at, ended_at, ended_reason)
    select 'r1-' || g, 's-' || lpad(g::text, 5, '0'), 'b', 'resume', 'sweeper',
           case g % 4 when 0 then 'running' when 1 then 'queued' else 'ended' end, 'Go.',
           '2026-01-02T00:00:00Z'::timestamptz,
           case when g % 4 >= 2 then '2026-01-02T00:00:00Z'::timestamptz + g * interval '1 second' end,
           case when g % 4 >= 2 then 'completed' end
      from generate_series(1, ${N}) g`;

  // Other sessions' runs, ten times as many: a page reads its own runs, not the table.
  await sql`insert into sessions (id, agent) select 'x-' || g, '{}'::jsonb from generate_series(1, ${10 * N}) g`;
  await sql`insert into runs (id, session_id, kind, trigger, status, input, ended_at, ended_reason)
    select 'rx-' || g, 'x-' || g, 'run', 'api', 'ended', 'Go.', now(), 'completed' from generate_series(1, ${10 * N}) g`;

  const store = new BatchStore(fleet.database);
  const results: Awaited<ReturnType<BatchStore["resultsPage"]>> = [];
  let pages = 0;
  const read = await readsWhile(
    fleet.database,
    async () => {
      const [row] = await sql<{ scans: string }[]>`
        select coalesce(sum(idx_scan), 0) as scans from pg_stat_user_indexes where relname = 'runs'`;
      const [seq] = await sql<{ n: string; rows: string; entries: string }[]>`
        select seq_scan as n, seq_tup_read as rows,
               (select coalesce(sum(idx_tup_read), 0) from pg_stat_user_indexes where relname = 'runs') as entries
          from pg_stat_user_tables where relname = 'runs'`;
      return {
        scans: Number(row!.scans),
        seqScans: Number(seq!.n),
        read: Number(seq!.rows) + Number(seq!.entries),
      };
    },
    async () => {
      for (let after = ""; ; ) {
        const page = await store.resultsPage("b", after, PAGE);
        pages++;
        results.push(...page);
        if (page.length < PAGE) break;
        after = page.at(-1)!.id;
      }
    },
  );
  console.log(
    `results of ${N} sessions in ${pages} pages: runs index scans ${read.scans}, sequential ${read.seqScans}, rows and entries read ${read.read}`,
  );
  expect(results.map((r) => r.sessionId)).toEqual(
    Array.from({ length: N }, (_, i) => `s-${String(i + 1).padStart(5, "0")}`),
  );
  const expected = (g: number) => {
    const status = (["running", "queued", "completed", "parked"] as const)[g % 4]!;
    const ended = new Date(Date.parse("2026-01-02T00:00:00Z") + g * 1000).toISOString();
    return {
      id: `s-${String(g).padStart(5, "0")}`,
      customId: `c-${g}`,
      sessionId: `s-${String(g).padStart(5, "0")}`,
      status,
      ...(status === "parked" ? { parkedReason: "max_resumes" } : {}),
      output: null,
      usage: zeroTotals(),
      endedAt: status === "completed" || status === "parked" ? ended : null,
    };
  };
  expect(results).toEqual(Array.from({ length: N }, (_, i) => expected(i + 1)));
  // One index scan node per page over the page's ids (`= any`), which Postgres before 17 counts
  // once per id it descends to: at most one per session, not two (and what it reads is the
  // page's runs, two per session, not the other sessions' runs).
  expect(read.scans + read.seqScans).toBeLessThanOrEqual(N + pages);
  expect(read.read).toBeLessThanOrEqual(2 * N + pages);
});
