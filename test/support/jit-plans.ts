/**
 * Whether a read is planned with JIT compilation, shown by its plan rather than by time: the
 * statements `read` sends are captured, then replayed in one transaction (its `set local`s
 * with them) on a connection that JIT-compiles whatever it may (every JIT cost 0), and the
 * statement holding `marker` is explained.
 */
import { drizzle } from "drizzle-orm/postgres-js";
import postgres from "postgres";
import { expect } from "vitest";
import type { Database } from "../../src/shared/db/client.js";
import type { FleetEnv } from "./fleet-env.js";

/** Every statement JIT-compiled, when JIT is on. */
const JIT_ALWAYS = { jit_above_cost: "0", jit_inline_above_cost: "0", jit_optimize_above_cost: "0" };

/** The EXPLAIN (ANALYZE) of the statement holding `marker` that `read` sends (see the file comment). */
export async function jitPlanOf(
  fleet: FleetEnv,
  read: (database: Database) => Promise<unknown>,
  marker: string,
): Promise<string> {
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
    await read({ url, sql: capturing, db: drizzle(capturing), close: async () => {} });
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
