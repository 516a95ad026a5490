/**
 * Usage and cost summed over a set of sessions, from their model steps' stored usage
 * (`messages.usage`, which carries `costUsd` when the model had a price: prices.ts): a step
 * with unknown usage (`null`) adds nothing to the sums and one to `unknownSteps`. A session's,
 * a batch's and a batch result line's sums start from the session's usage mark.
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

/**
 * Steps a read adds after a session's mark before it moves the mark on (a write of one small
 * row): a session read often while it grows writes at most once per this many steps.
 */
export const MARK_AFTER_STEPS = 64;

/**
 * The SQL of a lateral subquery giving one session's sums — its usage mark (schema.ts
 * `session_usage_marks`) plus the steps after it, of one snapshot — with `seq`, the last step
 * read after the mark (null: none), and `steps`, how many. `sessionId` is the SQL of the
 * session's id (a column of the outer query, or a parameter).
 */
export function sumsFromMark(sessionId: string): string {
  return `
    select a.input_tokens + coalesce(k.input_tokens, 0) as input_tokens,
           a.output_tokens + coalesce(k.output_tokens, 0) as output_tokens,
           a.cache_read_tokens + coalesce(k.cache_read_tokens, 0) as cache_read_tokens,
           a.cache_write_tokens + coalesce(k.cache_write_tokens, 0) as cache_write_tokens,
           a.reasoning_tokens + coalesce(k.reasoning_tokens, 0) as reasoning_tokens,
           (a.cost_usd + coalesce(k.cost_usd, 0))::text as cost_usd,
           a.unknown_steps + coalesce(k.unknown_steps, 0) as unknown_steps,
           a.seq, a.steps
      from (select 1) o
      left join session_usage_marks k on k.session_id = ${sessionId}
      cross join lateral (
        select ${USAGE_SUMS}, max(m.seq) as seq, count(*) as steps
          from messages m
         where m.session_id = ${sessionId} and m.role = 'assistant'
           and m.seq > coalesce(k.seq, 0)
      ) a`;
}

/** A row of sumsFromMark. */
export type MarkedSums = Omit<Row, "session_id"> & { seq: number | null; steps: string };

/**
 * One session's totals (`GET /v1/sessions/:id` when it answers only some messages): its usage
 * mark plus the steps after it. When that added `MARK_AFTER_STEPS` or more, the mark is moved
 * to the last step read — unless a concurrent read moved it further — so paging through a long
 * session reads its steps once, not once per page. Messages are never changed once stored, and
 * a later append only adds larger seqs, so a mark stays true (and goes with its session: ON
 * DELETE CASCADE).
 */
export async function usageOfSession(
  database: Pick<Database, "sql">,
  sessionId: string,
): Promise<UsageTotals> {
  const { sql } = database;
  const [r] = await sql<MarkedSums[]>`
    select u.* from (select ${sessionId}::text as id) s cross join lateral (${sql.unsafe(sumsFromMark("s.id"))}) u`;
  if (r) await moveMarks(database, [{ ...r, session_id: sessionId }]);
  return totalsOfRow(r);
}

/** Marks moved by one statement at most (a batch's first read may move one per session). */
const MARKS_PER_STATEMENT = 1_000;

/**
 * Moves the usage mark of each session among `sums` that added `MARK_AFTER_STEPS` steps or more
 * after its mark to `sums` (up to its `seq`), unless a concurrent read moved it there or
 * further. Best effort: a session deleted meanwhile (its row gone, the insert refused), or any
 * other failure, leaves the marks of that statement where they were and the answers as they are.
 */
export async function moveMarks(
  database: Pick<Database, "sql">,
  sums: readonly (MarkedSums & { session_id: string })[],
): Promise<void> {
  const { sql } = database;
  const moved = sums.filter((r) => r.seq !== null && Number(r.steps) >= MARK_AFTER_STEPS);
  for (let i = 0; i < moved.length; i += MARKS_PER_STATEMENT) {
    const rows = moved.slice(i, i + MARKS_PER_STATEMENT).map((r) => ({
      session_id: r.session_id,
      seq: r.seq,
      input_tokens: r.input_tokens,
      output_tokens: r.output_tokens,
      cache_read_tokens: r.cache_read_tokens,
      cache_write_tokens: r.cache_write_tokens,
      reasoning_tokens: r.reasoning_tokens,
      cost_usd: r.cost_usd,
      unknown_steps: r.unknown_steps,
    }));
    await sql`
      insert into session_usage_marks as old (session_id, seq, input_tokens, output_tokens,
             cache_read_tokens, cache_write_tokens, reasoning_tokens, cost_usd, unknown_steps)
      select r.session_id, r.seq, r.input_tokens, r.output_tokens, r.cache_read_tokens,
             r.cache_write_tokens, r.reasoning_tokens, r.cost_usd, r.unknown_steps
        from jsonb_to_recordset(${JSON.stringify(rows)}::jsonb) as r(session_id text, seq integer,
             input_tokens bigint, output_tokens bigint, cache_read_tokens bigint, cache_write_tokens bigint,
             reasoning_tokens bigint, cost_usd numeric, unknown_steps bigint)
      on conflict (session_id) do update
         set seq = excluded.seq, input_tokens = excluded.input_tokens, output_tokens = excluded.output_tokens,
             cache_read_tokens = excluded.cache_read_tokens, cache_write_tokens = excluded.cache_write_tokens,
             reasoning_tokens = excluded.reasoning_tokens, cost_usd = excluded.cost_usd,
             unknown_steps = excluded.unknown_steps
       where old.seq < excluded.seq`.catch(() => {});
  }
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

/**
 * The totals of a batch's sessions (GET /v1/batches/:id?include=usage): each session's mark
 * plus its steps after it (sumsFromMark), summed in one statement, which also gives back the
 * sessions whose marks to move (MARK_AFTER_STEPS new steps or more). A batch read again reads
 * its sessions' marks, not every step of every session.
 */
export async function usageOfBatch(database: Pick<Database, "sql">, batchId: string): Promise<UsageTotals> {
  // JIT off: planned at a cost that grows with the sessions' histories (the steps after a
  // mark estimated at a third of a session's messages), Postgres JIT-compiled it at each read:
  // 1.44 s of 1.5 s for 500 sessions of 5,000 messages (test/batch-reads-jit.test.ts).
  const [, rows] = await database.sql.begin((tx) => [
    tx`set local jit = off`,
    tx<(MarkedSums & { session_id: string | null })[]>`
    with u as materialized (
      select s.id, u.* from sessions s cross join lateral (${tx.unsafe(sumsFromMark("s.id"))}) u
       where s.batch_id = ${batchId}
    )
    select null as session_id, sum(input_tokens) as input_tokens, sum(output_tokens) as output_tokens,
           sum(cache_read_tokens) as cache_read_tokens, sum(cache_write_tokens) as cache_write_tokens,
           sum(reasoning_tokens) as reasoning_tokens, sum(cost_usd::numeric)::text as cost_usd,
           sum(unknown_steps) as unknown_steps, null as seq, null as steps
      from u
    union all
    select id, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens,
           cost_usd, unknown_steps, seq, steps
      from u where steps >= ${MARK_AFTER_STEPS}`,
  ]);
  const total = rows.find((r) => r.session_id === null);
  await moveMarks(
    database,
    rows.filter((r): r is MarkedSums & { session_id: string } => r.session_id !== null),
  );
  return totalsOfRow(total);
}
