/**
 * The session list (`GET /v1/sessions`, `fleet list`, a batch's parked sessions): filtered by
 * tenant, batch, state and parked reason, newest activity first, a keyset page at a time.
 */
import type postgres from "postgres";
import type { Database } from "../db/client.js";
import type { SessionRow } from "../db/schema.js";
import { notInDeletedBatch } from "./deleted-batches.js";
import { json } from "./rows.js";

/** How the session list filters on state (contracts §9): a session counts by its current state. */
export type ListStatus = "parked" | "active" | "cancelled" | "queued" | "running" | "completed";

/** A place in the session list: `updated_at` in microseconds since the epoch, and the id. */
export type ListCursor = { micros: string; id: string };

/** A session as the list shows it, with its place in the list's order. */
export type ListedSession = Pick<
  SessionRow,
  "id" | "batchId" | "customId" | "status" | "tailState" | "parkedReason" | "metadata" | "updatedAt"
> & {
  cursor: ListCursor;
  /** Its unfinished run's status, `running` before `queued` (null: none), for its public status. */
  runState: "running" | "queued" | null;
};

/** What the session list is filtered on (all given conditions hold). */
export type SessionListFilter = {
  parked?: boolean;
  limit: number;
  tenant?: string;
  /** Only the sessions of this batch. */
  batchId?: string;
  /** By current state (wins over `parked`). */
  status?: ListStatus;
  /** Only parked sessions parked for this reason. */
  parkedReason?: string;
  /** Only the sessions after this one in the list's order (a page's `cursor`). */
  before?: ListCursor;
  /**
   * About how many bytes the page may hold (metadata, parked reason and custom id as JSON
   * text, plus LIST_ROW_BYTES a row): the page stops before the row that would pass it (the
   * first row is always listed). Absent: `limit` alone bounds the page.
   */
  maxBytes?: number;
};

/** What a listed row costs beyond its metadata, parked reason and custom id (ids, states, times). */
export const LIST_ROW_BYTES = 256;

/** A page of the list, and whether `maxBytes` stopped it before `limit` rows. */
export type SessionListPage = { rows: ListedSession[]; cut: boolean };

/**
 * Sessions for operators, newest activity first; `parked` filters on parking, `tenant`
 * (when given) on ownership.
 */
export async function listSessions(database: Database, filter: SessionListFilter): Promise<ListedSession[]> {
  return (await listSessionPage(database, filter)).rows;
}

/**
 * A page of the session list (as listSessions), bounded by `filter.maxBytes` too: Postgres
 * sizes the `limit` candidate rows and sends only the ones within the budget, so a page of
 * 1,000 sessions with 64 KiB of metadata each is never read into the API's memory whole.
 */
export async function listSessionPage(
  database: Database,
  filter: SessionListFilter,
): Promise<SessionListPage> {
  const { sql } = database;
  const status =
    filter.status ?? (filter.parked === undefined ? undefined : filter.parked ? "parked" : "active");
  const { before, parkedReason } = filter;
  // Without a budget every candidate fits (a bigint no page reaches).
  const maxBytes = filter.maxBytes ?? Number.MAX_SAFE_INTEGER;
  // A plain postgres.js statement (prepared once per connection), not drizzle's builder,
  // which sent it unprepared: parsing, planning and building it cost the list more than
  // running it. The state is literal SQL (statusCondition), never a parameter, so a
  // cached generic plan can still use the partial index for parked sessions.
  // The candidates are sized first, without their metadata (the running sum needs no row
  // held but the candidates' ids); only the rows within the budget are read whole.
  // JIT off: a page of a big batch (`?batch=…&status=running&limit=1000`, 100,000 sessions) is
  // estimated high, and Postgres spent ~1 s a page compiling it with LLVM (as batch results and
  // usage did: batch-results.ts; test/batch-reads-jit.test.ts). `set local`, in the page's own
  // transaction: a pooler (PgBouncer) refuses startup parameters it does not know.
  const [, rows] = await sql.begin((tx) => [
    tx`set local jit = off`,
    tx<
      (Omit<ListedSession, "cursor" | "updatedAt"> & {
        updatedAt: string | Date;
        micros: string;
        candidates: string;
      })[]
    >`
    with page as (
      select s.id, s.updated_at,
             octet_length(s.metadata::text) + coalesce(octet_length(s.parked_reason), 0)
               + coalesce(octet_length(s.custom_id), 0) + ${tx.unsafe(String(LIST_ROW_BYTES))} as bytes
        from sessions s
       where true
           ${filter.tenant === undefined ? tx`` : tx`and s.tenant = ${filter.tenant} and ${notInDeletedBatch(tx, "s")}`}
           ${filter.batchId === undefined ? tx`` : tx`and s.batch_id = ${filter.batchId}`}
           ${status === undefined ? tx`` : tx`and ${statusCondition(tx, status)}`}
           ${
             parkedReason === undefined
               ? tx``
               : // The reason code (`attempts_exhausted`) matches the stored reason with its
                 // detail (`attempts_exhausted: 3 automatic resumes …`) too.
                 tx`and s.status = 'parked' and (s.parked_reason = ${parkedReason}
                      or s.parked_reason like ${`${parkedReason.replace(/[\\%_]/g, (c) => `\\${c}`)}:%`})`
           }
           ${
             // Keyset paging on (updated_at, id), to the microsecond: a page costs the same at any depth.
             before === undefined
               ? tx``
               : tx`and (s.updated_at, s.id) < (timestamptz 'epoch' + ${before.micros}::bigint * interval '1 microsecond', ${before.id})`
           }
       order by s.updated_at desc, s.id desc
       limit ${filter.limit}
    ), sized as (
      select p.id, p.updated_at, p.bytes, count(*) over () as candidates,
             sum(p.bytes) over (order by p.updated_at desc, p.id desc
                                rows between unbounded preceding and current row) as upto
        from page p
    )
    select s.id, s.batch_id as "batchId", s.custom_id as "customId", s.status, s.tail_state as "tailState",
           s.parked_reason as "parkedReason", s.metadata, s.updated_at as "updatedAt",
           (extract(epoch from z.updated_at) * 1000000)::bigint::text as micros, z.candidates::text as candidates,
           (select r.status from runs r where r.session_id = s.id and r.status in ('running', 'queued')
             order by r.status = 'running' desc limit 1) as "runState"
      from sized z
     -- Each row by its key (lateral): the page's rows are often estimated at one (its state's
     -- conditions on runs), and a join was then planned as a scan of every session per row
     -- ("limit 1" keeps Postgres from making it that join again).
     cross join lateral (select * from sessions s where s.id = z.id limit 1) s
     where z.upto <= ${maxBytes}::bigint or z.upto = z.bytes
     order by z.updated_at desc, z.id desc`,
  ]);
  const candidates = rows.length === 0 ? 0 : Number(rows[0]!.candidates);
  // Built field by field: a rest/spread copy of each row cost the list more than its query.
  return {
    cut: rows.length < candidates,
    rows: rows.map((row) => ({
      id: row.id,
      batchId: row.batchId,
      customId: row.customId,
      status: row.status,
      tailState: row.tailState,
      parkedReason: row.parkedReason,
      metadata: json<Record<string, unknown>>(row.metadata),
      updatedAt: new Date(row.updatedAt),
      cursor: { micros: row.micros, id: row.id },
      runState: row.runState,
    })),
  };
}

/** The session list's condition for a state (literal SQL, never a parameter), as counted for batches (batch-store.ts). */
function statusCondition(
  sql: postgres.Sql | postgres.TransactionSql,
  status: ListStatus,
): postgres.PendingQuery<postgres.Row[]> {
  const noRun = sql`not exists (select 1 from runs r where r.session_id = s.id and r.status <> 'ended')`;
  switch (status) {
    case "parked":
      return sql`s.status = 'parked'`;
    case "cancelled":
      return sql`s.status = 'cancelled'`;
    case "active":
      return sql`s.status = 'active'`;
    case "running":
      // Running, or interrupted and waiting for its automatic resume.
      return sql`s.status = 'active' and (exists (select 1 from runs r where r.session_id = s.id and r.status = 'running')
        or (${noRun} and s.run_started and s.tail_state <> 'completed'))`;
    case "queued":
      return sql`s.status = 'active' and exists (select 1 from runs r where r.session_id = s.id and r.status = 'queued')
        and not exists (select 1 from runs r where r.session_id = s.id and r.status = 'running')`;
    case "completed":
      return sql`s.status = 'active' and ${noRun} and (s.tail_state = 'completed' or not s.run_started)`;
  }
}
