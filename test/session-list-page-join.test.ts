/**
 * `GET /v1/sessions?batch=…&status=running` (or another state decided by the session's runs)
 * on a batch of many sessions: the page's rows are estimated at one (the state's conditions on
 * `runs`), and the join that reads each listed session whole was planned as a scan of every
 * session per listed row — on a batch of 100,000, 93 million rows compared for one page of
 * 1,000 (8.7 s a page, 62 s under EXPLAIN ANALYZE). Each listed row is now read by its key.
 * Counted in rows read by table scans of `sessions` (Postgres's statistics), not in time.
 */
import { expect, it } from "vitest";
import { listSessionPage } from "../src/shared/store/session-list.js";
import { queriesEnvForFile } from "./support/queries-env.js";
import { runsAndSessionsReads } from "./support/stat-reads.js";

const env = queriesEnvForFile("session-list-page-join");
const SESSIONS = 30_000;
const LIMIT = 1_000;

it("reads each listed session by its key, not every session per listed row", async () => {
  const { sql } = env.db;
  await sql`insert into batches (id, tenant, open) values ('big', 'default', false)`;
  // One in ten interrupted mid-run (listed as running), one in a hundred parked.
  await sql`insert into sessions (id, agent, batch_id, custom_id, run_started, tail_state, status, updated_at)
    select 's-' || g, '{}'::jsonb, 'big', 'c' || g, true, case when g % 10 = 0 then 'user' else 'completed' end,
           case when g % 100 = 0 then 'parked' else 'active' end, now() - g * interval '1 millisecond'
      from generate_series(1, ${SESSIONS}) g`;
  await sql`analyze sessions`;
  let page: Awaited<ReturnType<typeof listSessionPage>> | undefined;
  const reads = await runsAndSessionsReads(env.db, async () => {
    page = await listSessionPage(env.db, {
      tenant: "default",
      batchId: "big",
      status: "running",
      limit: LIMIT,
    });
  });
  console.log(
    `a page of ${page?.rows.length} running sessions of ${SESSIONS}: rows read by scans ${reads.seq}, index entries ${reads.index}`,
  );
  expect(page?.rows.length).toBe(LIMIT);
  expect(page?.rows.every((row) => row.tailState === "user" && row.status === "active")).toBe(true);
  // Before: a scan of the sessions per listed row, 5,555,560 rows read for this page.
  expect(reads.seq).toBeLessThan(SESSIONS);
}, 120_000);
