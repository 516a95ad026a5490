/**
 * A session's stored messages read as plain rows: each column as postgres.js parses it (jsonb
 * parsed per value) and one object per message. Reading a long history
 * this way costs a fraction of `row_to_json` per row, and far less than one `json_agg` of them
 * all: at 50,000 messages of 300 characters about 0.25 s against 0.4 s and 0.85 s here (the
 * aggregate is built by Postgres, sent as one 30 MB value and parsed at once).
 */
import type postgres from "postgres";
import type { Database } from "../db/client.js";
import { FencedError } from "../errors.js";
import type { Message, StoredMessage, ToolCall } from "../messages.js";
import { type MessageFields, storedMessage } from "./rows.js";

/**
 * Histories at most this long are read with the claim, in its statement (one round trip for
 * the common short session); a longer one is read after it (`readClaimedHistory`).
 */
export const INLINE_HISTORY_MAX = 200;

/**
 * The columns of `messages m` as MessageFields names them, and `createdAt` as the ISO text that
 * `Date.toISOString` gives (UTC, milliseconds truncated): formatted by Postgres rather than
 * parsed and formatted again per message here.
 */
function columns(sql: postgres.Sql | postgres.TransactionSql) {
  return sql`m.session_id as "sessionId", m.seq, m.role, m.content, m.tool_calls as "toolCalls",
    m.tool_call_id as "toolCallId", m.name, m.success, m.stop_reason as "stopReason", m.usage,
    m.provider_state as "providerState",
    to_char(m.created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') as "createdAt"`;
}

type Row = MessageFields & { createdAt: string };

const fromRow = (row: Row): StoredMessage => storedMessage(row, row.createdAt);

/**
 * The stored messages after `afterSeq`, in seq order; `limit`: at most that many. `sql`: the
 * pool's, or a transaction's.
 */
export async function readHistory(
  sql: postgres.Sql | postgres.TransactionSql,
  sessionId: string,
  afterSeq = 0,
  limit?: number,
): Promise<StoredMessage[]> {
  const rows = await sql<Row[]>`
    select ${columns(sql)} from messages m where m.session_id = ${sessionId} and m.seq > ${afterSeq}
     order by m.seq ${limit === undefined ? sql`` : sql`limit ${limit}`}`;
  return rows.map(fromRow);
}

/**
 * A page of the stored messages after `afterSeq`, in seq order: at most `limit`, and only as
 * many as fit in about `maxBytes` (texts, tool calls, usage and provider state; at least one).
 * `more`: messages follow the page. Sized first, so messages past the bound are never read.
 */
export async function readHistoryPage(
  sql: postgres.Sql | postgres.TransactionSql,
  sessionId: string,
  afterSeq: number,
  limit: number,
  maxBytes: number,
): Promise<{ messages: StoredMessage[]; more: boolean }> {
  const rows = await sql<(Row & { candidates: number })[]>`
    with p as (
      select m.seq, 256 + octet_length(m.content) + coalesce(octet_length(m.tool_calls::text), 0)
               + coalesce(octet_length(m.usage::text), 0) + coalesce(octet_length(m.provider_state::text), 0) as bytes
        from messages m where m.session_id = ${sessionId} and m.seq > ${afterSeq}
       order by m.seq limit ${limit + 1}
    ), z as (
      select p.seq, p.bytes, sum(p.bytes) over (order by p.seq) as upto, count(*) over () as candidates from p
    )
    select ${columns(sql)}, z.candidates::int as candidates
      from z join messages m on m.session_id = ${sessionId} and m.seq = z.seq
     where z.seq <= (select min(seq) from z) or z.upto <= ${maxBytes}::bigint
     order by m.seq limit ${limit}`;
  const candidates = rows[0]?.candidates ?? 0;
  return { messages: rows.map(({ candidates: _, ...row }) => fromRow(row)), more: candidates > rows.length };
}

/**
 * The history of a session just claimed at `epoch` whose claim did not read it (longer than
 * INLINE_HISTORY_MAX, so never empty): read only while the epoch is still the claim's, which
 * makes it exactly the history the claim saw (no other writer can append under that epoch).
 * Throws FencedError when another claim took the session meanwhile (or it was deleted).
 *
 * `known`: this session's history as an earlier job of this worker left it (history-cache.ts).
 * Stored messages are never changed or removed (only with their session), so `known` is
 * still the stored history's start, unless Postgres lost what it held (restored to an
 * earlier point): then its last message is gone, or another one has its seq. So only the
 * stored message at `known`'s last seq and those after it are read; when that message is
 * `known`'s (same role, content and createdAt), the others are pushed onto `known`, which is
 * returned; else the whole history is read. `read`: how many stored messages were read.
 */
export async function readClaimedHistory(
  database: Database,
  sessionId: string,
  epoch: number,
  known?: StoredMessage[],
): Promise<{ history: StoredMessage[]; read: number }> {
  const { sql } = database;
  const last = known?.at(-1);
  // A known history is contiguous from seq 1 (as every history of a job is).
  if (known && last && last.seq === known.length) {
    const rows = await sql<Row[]>`
      select ${columns(sql)} from sessions s join messages m on m.session_id = s.id
       where s.id = ${sessionId} and s.lease_epoch = ${epoch} and m.seq >= ${last.seq} order by m.seq`;
    const [first] = rows;
    if (isSame(first, last)) {
      for (let i = 1; i < rows.length; i++) known.push(fromRow(rows[i]!));
      return { history: known, read: rows.length };
    }
  }
  const rows = await sql<Row[]>`
    select ${columns(sql)} from sessions s join messages m on m.session_id = s.id
     where s.id = ${sessionId} and s.lease_epoch = ${epoch} order by m.seq`;
  if (rows.length === 0) throw new FencedError(sessionId, epoch);
  return { history: rows.map(fromRow), read: rows.length };
}

/** Whether the stored row is the message held in memory at its seq. */
function isSame(row: Row | undefined, message: StoredMessage): boolean {
  return (
    row !== undefined &&
    row.seq === message.seq &&
    row.role === message.role &&
    row.content === message.content &&
    row.createdAt === message.createdAt
  );
}

/**
 * The history's shape: every message with its role, seq, tool calls, call id, name and stop
 * reason, but no text (`content` empty, `success` false, no usage or provider state). All that
 * `resumePoint` reads. Sent as one JSON array of arrays: at 50,000 messages about 0.1 s, where
 * the same columns as rows take 0.25 s (postgres.js's work per row and column dominates).
 */
export async function readHistoryShape(
  sql: postgres.Sql | postgres.TransactionSql,
  sessionId: string,
): Promise<Message[]> {
  return (await readShapeAndLastSeq(sql, sessionId)).shape;
}

/** `readHistoryShape`, and the highest seq stored (0: none), read in the same statement. */
export async function readShapeAndLastSeq(
  sql: postgres.Sql | postgres.TransactionSql,
  sessionId: string,
): Promise<{ shape: Message[]; lastSeq: number }> {
  const [row] = await sql<{ shape: string | ShapeRow[]; last_seq: number }[]>`
    select ${shapeColumns(sql)}, coalesce(max(m.seq), 0)::int as last_seq
      from messages m where m.session_id = ${sessionId}`;
  return { shape: shapeOf(row!.shape, sessionId), lastSeq: row!.last_seq };
}

/**
 * The shape of a history's tail, from its last assistant message on (the whole history when it
 * has none), with the session's stored `tailState` of the whole: the index entries read are the
 * tail's, not the history's. `start`: the index of the tail's first message
 * in the history. What decides a resume point and checks a page appended after it, when the
 * stored history is known well formed (history-tail.ts `resumePointOfTail`).
 */
export async function readShapeTail(
  sql: postgres.Sql | postgres.TransactionSql,
  sessionId: string,
): Promise<{ shape: Message[]; start: number; lastSeq: number; tailState: string | null }> {
  // Where the tail starts first (lastAssistantSeq), then the tail from there: a bound known when
  // the second is planned is a range of the primary key; one computed in the same statement was
  // planned as a third of the table (every message of the session read).
  const [session] = await sql<{ tail_state: string | null; last_seq: number }[]>`
    select s.tail_state, s.last_seq from sessions s where s.id = ${sessionId}`;
  const startSeq = await lastAssistantSeq(sql, sessionId, session?.last_seq ?? 0);
  const [row] = await sql<{ shape: string | ShapeRow[]; last_seq: number }[]>`
    select ${shapeColumns(sql)}, coalesce(max(m.seq), 0)::int as last_seq
      from messages m where m.session_id = ${sessionId} and m.seq >= ${startSeq}`;
  return {
    shape: shapeOf(row!.shape, sessionId),
    start: startSeq - 1,
    lastSeq: row!.last_seq,
    tailState: session?.tail_state ?? null,
  };
}

/** The first window of seqs `lastAssistantSeq` looks in, back from the last: doubled each time. */
const FIRST_WINDOW = 64;

/**
 * The seq of the session's last assistant message at or before `lastSeq`, 1 when there is none:
 * looked for in ranges of the primary key back from `lastSeq`, each twice the one before, so
 * the index entries read are at most about twice the tail's, whatever Postgres estimates of
 * the session. One statement with `order by seq desc limit 1` was planned, while the table's
 * statistics did not know the session (an import, a day of runs since the last analyze), as
 * a bitmap scan of all its messages and a sort.
 */
async function lastAssistantSeq(
  sql: postgres.Sql | postgres.TransactionSql,
  sessionId: string,
  lastSeq: number,
): Promise<number> {
  for (let high = lastSeq, window = FIRST_WINDOW; high > 0; high -= window, window *= 2) {
    const [row] = await sql<{ seq: number | null }[]>`
      select max(m.seq)::int as seq from messages m
       where m.session_id = ${sessionId} and m.seq > ${high - window} and m.seq <= ${high}
         and m.role = 'assistant'`;
    if (row?.seq) return row.seq;
  }
  return 1;
}

/** The shape's columns of `messages m`, as one JSON array of arrays in seq order. */
function shapeColumns(sql: postgres.Sql | postgres.TransactionSql) {
  return sql`coalesce(json_agg(json_build_array(m.role, case when m.role = 'assistant' then m.tool_calls end,
                                                m.tool_call_id, m.name, m.stop_reason) order by m.seq), '[]') as shape`;
}

function shapeOf(raw: string | ShapeRow[], sessionId: string): Message[] {
  const shape = typeof raw === "string" ? (JSON.parse(raw) as ShapeRow[]) : raw;
  return shape.map(([role, toolCalls, toolCallId, name, stopReason]): Message => {
    switch (role) {
      case "assistant":
        return {
          role,
          content: "",
          stopReason: stopReason ?? "",
          ...(toolCalls && toolCalls.length > 0 ? { toolCalls } : {}),
        };
      case "tool":
        return { role, toolCallId: toolCallId ?? "", name: name ?? "", content: "", success: false };
      case "user":
      case "internal":
        return { role, content: "" };
      default:
        throw new Error(`stored message of session ${sessionId} has unknown role ${role}`);
    }
  });
}

type ShapeRow = [string, ToolCall[] | null, string | null, string | null, string | null];

/** Whether a run of the session is queued or running (a resume point is then `running`). */
export async function hasUnendedRun(sql: postgres.Sql, sessionId: string, tenant?: string): Promise<boolean> {
  const [row] = await sql<{ any: boolean }[]>`
    select exists (select 1 from runs r where r.session_id = ${sessionId} and r.status <> 'ended'
                   ${tenant === undefined ? sql`` : sql`and r.tenant = ${tenant}`}) as any`;
  return row!.any;
}
