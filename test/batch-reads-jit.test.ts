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
import { drizzle } from "drizzle-orm/postgres-js";
import postgres from "postgres";
import { afterAll, beforeAll, expect, it } from "vitest";
import type { Database } from "../src/shared/db/client.js";
import { BatchStore } from "../src/shared/store/batches.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

/** Every statement JIT-compiled, when JIT is on. */
const JIT_ALWAYS = { jit_above_cost: "0", jit_inline_above_cost: "0", jit_optimize_above_cost: "0" };

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

/**
 * The plan of the statement holding `marker` that `read` sends, after the statements it sends
 * before it (in one transaction), on a connection that JIT-compiles whatever it may.
 */
async function planOf(read: (store: BatchStore) => Promise<unknown>, marker: string): Promise<string> {
  const [jit] = await fleet.database.sql<{ available: boolean }[]>`select pg_jit_available() as available`;
  // The Postgres the tests run on has JIT (LLVM): without it there is nothing to show.
  expect(jit?.available).toBe(true);
  const sent: { query: string; params: unknown[] }[] = [];
  const options = { max: 1, fetch_types: false, onnotice: () => {} };
  const capturing = postgres(fleet.config.databaseUrl, {
    ...options,
    debug: (_connection, query, params) => sent.push({ query, params: params as unknown[] }),
  });
  const replay = postgres(fleet.config.databaseUrl, { ...options, connection: JIT_ALWAYS });
  try {
    const { databaseUrl: url } = fleet.config;
    const database: Database = { url, sql: capturing, db: drizzle(capturing), close: async () => {} };
    await read(new BatchStore(database));
    const at = sent.findIndex((s) => s.query.includes(marker));
    expect(at).toBeGreaterThanOrEqual(0);
    const plan = await replay.begin(async (tx) => {
      for (const s of sent.slice(0, at))
        if (!/^\s*(begin|commit|rollback)\b/i.test(s.query)) await tx.unsafe(s.query, s.params as never[]);
      const rows = await tx.unsafe(`explain (analyze) ${sent[at]!.query}`, sent[at]!.params as never[]);
      return rows.map((row) => String(row["QUERY PLAN"])).join("\n");
    });
    console.log(
      plan
        .split("\n")
        .filter((line) => /JIT|Timing|Execution Time/.test(line))
        .join("\n"),
    );
    return plan;
  } finally {
    await capturing.end();
    await replay.end();
  }
}

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
