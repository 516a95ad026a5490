/**
 * A page of a batch's results (`GET /v1/batches/:id/results`, batch-results.ts) and a batch's
 * usage (`GET /v1/batches/:id?include=usage`, session-usage.ts) are planned at a cost that grows
 * with the sessions' histories (each session's usage after its mark is estimated at a third of
 * its messages, though a mark leaves none to read), and past `jit_above_cost` Postgres compiled
 * them with LLVM at each read. 500 sessions of 5,000 messages: a page of results 0.6–1.4 s of
 * JIT for 50 ms of work; the usage 1.44 s of JIT in 1.5 s. They now run with JIT off. Shown
 * by the plan Postgres makes of the statements each read sends, replayed in one transaction on
 * a connection that JIT-compiles anything it may (every JIT cost 0), not by time.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { BatchStore } from "../src/shared/store/batches.js";
import { listSessionPage } from "../src/shared/store/session-list.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { jitPlanOf } from "./support/jit-plans.js";

let fleet: FleetEnv;
beforeAll(async () => {
  fleet = await createFleetEnv("batchreadsjit");
  const { sql } = fleet.database;
  await sql`insert into batches (id, tenant, open) values ('b', 'default', false)`;
  await sql`insert into sessions (id, custom_id, agent, batch_id, run_started, tail_state, last_seq)
    select 's-' || g, 'c-' || g, '{}'::jsonb, 'b', true, 'completed', 4 from generate_series(1, 3) g`;
  await sql`insert into messages (session_id, seq, role, content, stop_reason, usage)
    select 's-' || g, n, case when n % 2 = 0 then 'assistant' else 'user' end, 'text ' || n,
           case when n % 2 = 0 then 'end_turn' end,
           case when n % 2 = 0 then '{"inputTokens": 10, "outputTokens": 5}'::jsonb end
      from generate_series(1, 3) g, generate_series(1, 4) n`;
}, 60_000);
afterAll(() => fleet?.close());

const planOf = (read: (store: BatchStore) => Promise<unknown>, marker: string) =>
  jitPlanOf(fleet, (database) => read(new BatchStore(database)), marker);

it("a page of results is planned without JIT compilation", async () => {
  let page: { output: string | null }[] = [];
  const plan = await planOf(async (store) => {
    page = await store.resultsPage("b", "", 500);
  }, "with p as");
  expect(page.map((r) => r.output)).toEqual(["text 4", "text 4", "text 4"]);
  // Before: "JIT:" with its functions and timings (Generation, Inlining, Optimization, Emission).
  expect(plan).not.toContain("JIT:");
}, 60_000);

it("a batch's usage is planned without JIT compilation", async () => {
  let usage: { inputTokens: number } | undefined;
  const plan = await planOf(async (store) => {
    usage = await store.usage("b");
  }, "with u as materialized");
  expect(usage?.inputTokens).toBe(3 * 2 * 10);
  expect(plan).not.toContain("JIT:");
}, 60_000);

it("a page of a batch's session list is planned without JIT compilation", async () => {
  // GET /v1/sessions?batch=…&status=running&limit=1000 on a batch of 100,000 sessions: ~1 s a
  // page of LLVM compiling while Postgres's estimate was high.
  let ids: string[] = [];
  const plan = await jitPlanOf(
    fleet,
    async (database) => {
      const page = await listSessionPage(database, { batchId: "b", status: "completed", limit: 1000 });
      ids = page.rows.map((row) => row.id);
    },
    "with page as",
  );
  expect(ids.sort()).toEqual(["s-1", "s-2", "s-3"]);
  expect(plan).not.toContain("JIT:");
}, 60_000);
