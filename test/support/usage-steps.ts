/**
 * Model steps with made-up usage, inserted straight into `messages`, and the sums a read of
 * their usage must answer: for the tests of usage marks (store/session-usage.ts).
 */
import type { Database } from "../../src/shared/db/client.js";
import type { UsageTotals } from "../../src/shared/prices.js";

/**
 * Appends `count` messages after `from` to session `id`, every other one an assistant step
 * whose usage is made from its seq (every seventh unknown: JSON null), and returns the seq of
 * the last.
 */
export async function appendSteps(
  database: Database,
  id: string,
  from: number,
  count: number,
): Promise<number> {
  await database.sql`
    insert into messages (session_id, seq, role, content, usage)
    select ${id}, s, case when s % 2 = 0 then 'assistant' else 'user' end, 'x',
           case when s % 2 = 1 then null
                when s % 7 = 0 then 'null'::jsonb
                else jsonb_build_object('inputTokens', s, 'outputTokens', 2 * s, 'cacheReadTokens', 1,
                                        'cacheWriteTokens', 0, 'reasoningTokens', s % 3, 'costUsd', s * 0.000001::numeric) end
      from generate_series(${from + 1}::int, ${from + count}::int) s`;
  await database.sql`update sessions set last_seq = ${from + count} where id = ${id}`;
  return from + count;
}

/** The sums over every step appendSteps made up to `last`, as a read summing them all answers. */
export function expectedUsage(last: number): UsageTotals {
  const totals = { input: 0, output: 0, cacheRead: 0, reasoning: 0, cost: 0, unknown: 0 };
  for (let s = 2; s <= last; s += 2) {
    if (s % 7 === 0) {
      totals.unknown += 1;
      continue;
    }
    totals.input += s;
    totals.output += 2 * s;
    totals.cacheRead += 1;
    totals.reasoning += s % 3;
    totals.cost += s;
  }
  return {
    inputTokens: totals.input,
    outputTokens: totals.output,
    cacheReadTokens: totals.cacheRead,
    cacheWriteTokens: 0,
    reasoningTokens: totals.reasoning,
    costUsd: Math.round(totals.cost) / 1_000_000,
    unknownSteps: totals.unknown,
  };
}

/** The seq of session `id`'s usage mark (null: none). */
export async function markOf(database: Database, id: string): Promise<number | null> {
  const [row] = await database.sql<
    { seq: number }[]
  >`select seq from session_usage_marks where session_id = ${id}`;
  return row?.seq ?? null;
}
