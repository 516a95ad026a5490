/**
 * A page of a batch's results (`GET /v1/batches/:id/results`, batch-results.ts) is planned at
 * a cost that grows with its sessions' histories (each session's usage after its mark is
 * estimated at a third of its messages, though a mark leaves none to read), and past
 * `jit_above_cost` Postgres compiled it with LLVM on every page: 200 sessions of 5,000
 * messages, 100–225 ms of JIT for 20 ms of work; 500 of them, 0.6–1.4 s for 50 ms (a batch of
 * 100,000 such sessions: 200 pages, minutes of compiling). The page now runs with JIT off.
 * Shown by the plan Postgres makes of the statements the page sends, replayed in one
 * transaction on a connection that JIT-compiles anything it may (all JIT costs 0), not by time.
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
  fleet = await createFleetEnv("batchresultsjit");
}, 60_000);
afterAll(() => fleet?.close());

it("a page of results is planned without JIT compilation", async () => {
  const { sql } = fleet.database;
  const [jit] = await sql<{ available: boolean }[]>`select pg_jit_available() as available`;
  // The Postgres the tests run on has JIT (LLVM): without it there is nothing to show.
  expect(jit?.available).toBe(true);
  await sql`insert into batches (id, tenant, open) values ('b', 'default', false)`;
  await sql`insert into sessions (id, custom_id, agent, batch_id, run_started, tail_state, last_seq)
    select 's-' || g, 'c-' || g, '{}'::jsonb, 'b', true, 'completed', 4 from generate_series(1, 3) g`;
  await sql`insert into messages (session_id, seq, role, content, stop_reason)
    select 's-' || g, n, case when n % 2 = 0 then 'assistant' else 'user' end, 'text ' || n,
           case when n % 2 = 0 then 'end_turn' end
      from generate_series(1, 3) g, generate_series(1, 4) n`;

  // What the page sends, in order.
  const sent: { query: string; params: unknown[] }[] = [];
  const capturing = postgres(fleet.config.databaseUrl, {
    max: 1,
    fetch_types: false,
    onnotice: () => {},
    debug: (_connection, query, params) => sent.push({ query, params: params as unknown[] }),
  });
  const replay = postgres(fleet.config.databaseUrl, {
    max: 1,
    fetch_types: false,
    onnotice: () => {},
    connection: JIT_ALWAYS,
  });
  try {
    const database: Database = {
      url: fleet.config.databaseUrl,
      sql: capturing,
      db: drizzle(capturing),
      close: async () => {},
    };
    const page = await new BatchStore(database).resultsPage("b", "", 500);
    expect(page.map((r) => r.output)).toEqual(["text 4", "text 4", "text 4"]);
    const at = sent.findIndex((s) => s.query.includes("with p as"));
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
    // Before: "JIT:" with its functions and timings (Generation, Inlining, Optimization, Emission).
    expect(plan).not.toContain("JIT:");
  } finally {
    await capturing.end();
    await replay.end();
  }
}, 60_000);
