/**
 * Usage and cost summed over a set of sessions, from their model steps' stored usage
 * (`messages.usage`, which carries `costUsd` when the model had a price: prices.ts). One
 * query, for batch results and reports: a step with unknown usage (`null`) adds nothing to
 * the sums and one to `unknownSteps`.
 */
import type { Database } from "../db/client.js";
import { roundUsd, type UsageTotals, zeroTotals } from "../prices.js";

export type SessionUsage = UsageTotals & { sessionId: string };

type Row = {
  session_id: string;
  input_tokens: string;
  output_tokens: string;
  cache_read_tokens: string;
  cache_write_tokens: string;
  reasoning_tokens: string;
  cost_usd: string;
  unknown_steps: string;
};

/**
 * The sums' SQL over `messages m` rows of assistant steps: only usage objects are summed, and
 * any other usage (SQL or JSON null) is an unknown step.
 */
export const USAGE_SUMS = `
  coalesce(sum((m.usage->>'inputTokens')::bigint) filter (where jsonb_typeof(m.usage) = 'object'), 0) as input_tokens,
  coalesce(sum((m.usage->>'outputTokens')::bigint) filter (where jsonb_typeof(m.usage) = 'object'), 0) as output_tokens,
  coalesce(sum((m.usage->>'cacheReadTokens')::bigint) filter (where jsonb_typeof(m.usage) = 'object'), 0) as cache_read_tokens,
  coalesce(sum((m.usage->>'cacheWriteTokens')::bigint) filter (where jsonb_typeof(m.usage) = 'object'), 0) as cache_write_tokens,
  coalesce(sum((m.usage->>'reasoningTokens')::bigint) filter (where jsonb_typeof(m.usage) = 'object'), 0) as reasoning_tokens,
  coalesce(sum((m.usage->>'costUsd')::numeric) filter (where jsonb_typeof(m.usage) = 'object'), 0) as cost_usd,
  count(*) filter (where coalesce(jsonb_typeof(m.usage), 'null') <> 'object') as unknown_steps`;

/** A row of USAGE_SUMS as totals (null columns: a session with no step). */
export function totalsOfRow(
  r: { [K in Exclude<keyof Row, "session_id">]?: string | null } | undefined,
): UsageTotals {
  return {
    inputTokens: Number(r?.input_tokens ?? 0),
    outputTokens: Number(r?.output_tokens ?? 0),
    cacheReadTokens: Number(r?.cache_read_tokens ?? 0),
    cacheWriteTokens: Number(r?.cache_write_tokens ?? 0),
    reasoningTokens: Number(r?.reasoning_tokens ?? 0),
    costUsd: roundUsd(Number(r?.cost_usd ?? 0)),
    unknownSteps: Number(r?.unknown_steps ?? 0),
  };
}

/** Per session (sessions without a model step are absent). */
export async function usageOfSessions(
  database: Database,
  sessionIds: readonly string[],
): Promise<SessionUsage[]> {
  if (sessionIds.length === 0) return [];
  const { sql } = database;
  const rows = await sql<Row[]>`
    select m.session_id, ${sql.unsafe(USAGE_SUMS)}
      from messages m
     where m.session_id in (select jsonb_array_elements_text(${JSON.stringify(sessionIds)}::jsonb))
       and m.role = 'assistant'
     group by m.session_id`;
  return rows.map((r) => ({ sessionId: r.session_id, ...totalsOfRow(r) }));
}

/** One session's totals (`GET /v1/sessions/:id` when it answers only some messages). */
export async function usageOfSession(
  database: Pick<Database, "sql">,
  sessionId: string,
): Promise<UsageTotals> {
  const { sql } = database;
  const [r] = await sql<Omit<Row, "session_id">[]>`
    select ${sql.unsafe(USAGE_SUMS)} from messages m where m.session_id = ${sessionId} and m.role = 'assistant'`;
  return totalsOfRow(r);
}

/** The totals of a set of sessions (e.g. a batch's). */
export async function totalUsageOfSessions(
  database: Database,
  sessionIds: readonly string[],
): Promise<UsageTotals> {
  const total = zeroTotals();
  for (const { sessionId: _id, ...u } of await usageOfSessions(database, sessionIds)) {
    for (const key of Object.keys(total) as (keyof UsageTotals)[]) total[key] += u[key];
  }
  total.costUsd = roundUsd(total.costUsd);
  return total;
}

/** The totals of a batch's sessions (GET /v1/batches/:id?include=usage), in one aggregate. */
export async function usageOfBatch(database: Pick<Database, "sql">, batchId: string): Promise<UsageTotals> {
  const { sql } = database;
  const [r] = await sql<Omit<Row, "session_id">[]>`
    select ${sql.unsafe(USAGE_SUMS)}
      from sessions s join messages m on m.session_id = s.id
     where s.batch_id = ${batchId} and m.role = 'assistant'`;
  return totalsOfRow(r);
}
