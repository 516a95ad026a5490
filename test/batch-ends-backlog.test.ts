/**
 * The sweeper's batch-end scan (BatchEnds) over more unsettled batches than one page: batches
 * whose webhooks are still owed — a receiver down for a day keeps each one owed for up to
 * 24 h of retries — must not hide the batches behind them. Before, the scan read the 500
 * oldest unsettled batches again and again, so with 500 webhooks owed a newer batch was
 * never recorded as ended nor got its webhook queued until one of the old ones settled.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { openWebhookQueue, QUEUES } from "../src/shared/queues.js";
import { BatchStore } from "../src/shared/store/batches.js";
import { BatchEnds } from "../src/sweeper/batch-ends.js";
import { countedDatabase } from "./support/counted-statements.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

let fleet: FleetEnv;
beforeAll(async () => {
  fleet = await createFleetEnv("batch-ends-backlog");
});
afterAll(async () => {
  await fleet?.close();
});

it("reaches a new batch behind a page of batches whose webhooks are still owed", async () => {
  const { sql } = fleet.database;
  const page = 500; // the scan's page
  // A page of old batches that ended and whose webhooks have not been delivered yet.
  await sql`
    insert into batches (id, tenant, webhook_url, created_at, ended_at)
    select 'old-' || i, 'default', 'http://127.0.0.1:9/hook', now() - interval '2 hours' + i * interval '1 second', now()
      from generate_series(1, ${page}) as i`;
  // Then a batch without sessions (so it has ended) that no scan has seen yet.
  await sql`insert into batches (id, tenant, webhook_url) values ('new', 'default', 'http://127.0.0.1:9/hook')`;

  const queue = openWebhookQueue(fleet.redis, fleet.config.prefix);
  try {
    let now = Date.now();
    const ends = new BatchEnds({
      store: new BatchStore(fleet.database),
      queue,
      log: { info: () => {}, warn: () => {} },
      now: () => now,
    });
    for (let i = 0; i < 3; i++) {
      await ends.scan();
      now += 1_000;
    }
    const [row] = await sql<
      { ended: boolean }[]
    >`select ended_at is not null as ended from batches where id = 'new'`;
    expect(row!.ended).toBe(true);
    expect(await queue.getJob(QUEUES.webhooks.jobId({ batchId: "new" }))).toBeDefined();
    // The old batches' webhooks are still queued again as before (every 10 s at most).
    expect(await queue.getJob(QUEUES.webhooks.jobId({ batchId: "old-1" }))).toBeDefined();
    expect(await queue.getJob(QUEUES.webhooks.jobId({ batchId: `old-${page}` }))).toBeDefined();
  } finally {
    await queue.close();
  }
});

it("looks at a page of unsettled batches in one transaction, not one per batch", async () => {
  const { sql } = fleet.database;
  // Out of this test's way: the batches of the test before.
  await sql`update batches set deleted_at = now()`;
  // 40 closed batches, each with a session whose run is still queued (not ended), and one whose
  // only session completed (it has ended).
  await sql`insert into batches (id, tenant, open) select 'run-' || i, 'default', false from generate_series(1, 40) as i`;
  await sql`insert into sessions (id, agent, batch_id) select 's-' || i, '{}'::jsonb, 'run-' || i from generate_series(1, 40) as i`;
  await sql`insert into runs (id, session_id, batch_id, kind, trigger, status, input)
             select 'r-' || i, 's-' || i, 'run-' || i, 'run', 'api', 'queued', 'x' from generate_series(1, 40) as i`;
  await sql`insert into batches (id, tenant, open) values ('done', 'default', false)`;
  await sql`insert into sessions (id, agent, batch_id, run_started, tail_state)
             values ('s-done', '{}'::jsonb, 'done', true, 'completed')`;

  const counted = countedDatabase(fleet.config.databaseUrl);
  try {
    const ends = new BatchEnds({
      store: new BatchStore(counted.database),
      queue: {} as never, // no webhook: nothing is queued
      log: { info: () => {}, warn: () => {} },
    });
    expect(await ends.scan()).toBe(1);
    // The page, then one transaction (begin, its setting, the look, commit) for its 41
    // batches, then the one that ended recorded. Before: a transaction per batch (167 statements).
    expect(counted.statements.filter((s) => /^begin/i.test(s))).toHaveLength(1);
    expect(counted.statements).toHaveLength(6);
    const [row] = await sql<
      { ended: boolean }[]
    >`select ended_at is not null as ended from batches where id = 'done'`;
    expect(row).toEqual({ ended: true });
    counted.statements.length = 0;
    // The next scan: the 40 still running, looked at in one transaction again.
    expect(await ends.scan()).toBe(0);
    expect(counted.statements).toHaveLength(5);
  } finally {
    await counted.database.close();
  }
});
