/**
 * Usage and cost summed over a set of sessions, from their model steps' stored usage
 * (`messages.usage`, which carries `costUsd` when the model had a price: prices.ts). One
 * query, for batch results and reports: a step with unknown usage (`null`) counts nothing.
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
};

/** Per session (sessions without a priced or reported step are absent). */
export async function usageOfSessions(
  database: Database,
  sessionIds: readonly string[],
): Promise<SessionUsage[]> {
  if (sessionIds.length === 0) return [];
  const rows = await database.sql<Row[]>`
    select session_id,
           coalesce(sum((usage->>'inputTokens')::bigint), 0) as input_tokens,
           coalesce(sum((usage->>'outputTokens')::bigint), 0) as output_tokens,
           coalesce(sum((usage->>'cacheReadTokens')::bigint), 0) as cache_read_tokens,
           coalesce(sum((usage->>'cacheWriteTokens')::bigint), 0) as cache_write_tokens,
           coalesce(sum((usage->>'reasoningTokens')::bigint), 0) as reasoning_tokens,
           coalesce(sum((usage->>'costUsd')::numeric), 0) as cost_usd
      from messages
     where session_id in (select jsonb_array_elements_text(${JSON.stringify(sessionIds)}::jsonb))
       and role = 'assistant'
       and jsonb_typeof(usage) = 'object'
     group by session_id`;
  return rows.map((r) => ({
    sessionId: r.session_id,
    inputTokens: Number(r.input_tokens),
    outputTokens: Number(r.output_tokens),
    cacheReadTokens: Number(r.cache_read_tokens),
    cacheWriteTokens: Number(r.cache_write_tokens),
    reasoningTokens: Number(r.reasoning_tokens),
    costUsd: roundUsd(Number(r.cost_usd)),
  }));
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
  const [r] = await database.sql<Omit<Row, "session_id">[]>`
    select coalesce(sum((m.usage->>'inputTokens')::bigint), 0) as input_tokens,
           coalesce(sum((m.usage->>'outputTokens')::bigint), 0) as output_tokens,
           coalesce(sum((m.usage->>'cacheReadTokens')::bigint), 0) as cache_read_tokens,
           coalesce(sum((m.usage->>'cacheWriteTokens')::bigint), 0) as cache_write_tokens,
           coalesce(sum((m.usage->>'reasoningTokens')::bigint), 0) as reasoning_tokens,
           coalesce(sum((m.usage->>'costUsd')::numeric), 0) as cost_usd
      from sessions s join messages m on m.session_id = s.id
     where s.batch_id = ${batchId} and m.role = 'assistant' and jsonb_typeof(m.usage) = 'object'`;
  return {
    inputTokens: Number(r?.input_tokens ?? 0),
    outputTokens: Number(r?.output_tokens ?? 0),
    cacheReadTokens: Number(r?.cache_read_tokens ?? 0),
    cacheWriteTokens: Number(r?.cache_write_tokens ?? 0),
    reasoningTokens: Number(r?.reasoning_tokens ?? 0),
    costUsd: roundUsd(Number(r?.cost_usd ?? 0)),
  };
}
