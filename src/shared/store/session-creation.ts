/**
 * Creating sessions — each optionally with its imported history and its first queued run, in
 * a new batch or an open one — in one statement: stored whole or not at all.
 */
import { randomUUID } from "node:crypto";
import type postgres from "postgres";
import type { AgentConfig } from "../agent-config.js";
import type { Database } from "../db/client.js";
import { ConflictError, NotFoundError, ValidationError } from "../errors.js";
import { stringifyInSlices } from "../event-loop-slices.js";
import { addCalls, importedCalls, type Spent } from "../imported-spent.js";
import type { Message } from "../messages.js";
import { orderedIds } from "../ordered-ids.js";
import { QUEUES } from "../queues.js";
import { tailState } from "../tail-state.js";
import { importedTokens } from "../usage.js";
import { holdActiveSessions } from "./active-sessions.js";
import { DEFAULT_TENANT } from "./api-keys.js";
import { historyBytes } from "./history-bytes.js";
import { toNewRows } from "./rows.js";
import type { RunLimits } from "./run-queueing.js";

export type NewSession = {
  agent: AgentConfig;
  metadata?: Record<string, unknown>;
  messages?: readonly Message[];
  /** The first user message: stored on a queued run in the same transaction. */
  input?: string;
  id?: string;
  /** Whose session it is (contracts §10); `default` when not given. */
  tenant?: string;
  /** The caller's id for it within its batch (unique there). */
  customId?: string;
  /**
   * false: no event stream is written for it (contracts §7). A batch's session without it takes
   * the batch's setting; true in a batch created without streams is refused (`refuseStreams`).
   */
  sessionEvents?: boolean;
  /**
   * What it spent of its budget beyond its imported history's steps (imported-spent.ts), counted
   * with theirs; an imported step counts one model call and its reported tokens in any case.
   */
  spentOutside?: Spent;
};

/**
 * A batch created with `sessionEvents: false` promised that none of its sessions has an event
 * stream: a session of it asking for one is a 400 naming `sessions[i].sessionEvents`.
 */
function refuseStreams(batchHasStreams: boolean, inputs: readonly NewSession[]): void {
  if (batchHasStreams) return;
  const i = inputs.findIndex((input) => input.sessionEvents === true);
  if (i >= 0)
    throw new ValidationError(
      `sessions[${i}].sessionEvents`,
      "cannot be true: the batch was created with sessionEvents: false, so none of its sessions has an event stream",
    );
}

/** Where a batch's sessions go: a new batch, or one still open (contracts §9). */
export type BatchTarget = {
  id: string;
  tenant: string;
  /** Insert the batch row (a new batch), or append to an open one of this tenant. */
  create: boolean;
  webhookUrl?: string | null;
  /** After these sessions: whether it takes more (`POST /v1/batches/:id/sessions`). */
  open: boolean;
  /**
   * A new batch's `sessionEvents` (default true); its sessions, also those appended later, take
   * the batch's unless one turns its own stream off.
   */
  sessionEvents?: boolean;
};

/**
 * Creates sessions — each with its imported history and, when it has `input`, its first
 * queued run — all in one transaction: a batch is stored whole or not at all.
 */
export async function createSessions(
  database: Database,
  inputs: readonly NewSession[],
  limits: RunLimits = {},
  batch?: BatchTarget,
): Promise<{ id: string; runId: string | null }[]> {
  const { maxActiveSessions: max } = limits;
  const rows = (ids: readonly string[]) => newRows(inputs, ids, batch);
  if (!batch || batch.create) {
    // Ids in the order of `inputs` (ordered-ids.ts); no other part of a new batch exists yet.
    const built = await rows(orderedIds(inputs.length, Date.now()));
    if (max === undefined || built.newActive.size === 0) {
      // Nothing to hold: no transaction. A new batch's row goes in the same statement (before, a
      // transaction of four round trips: begin, the batch, its sessions, commit).
      if (batch) refuseStreams(batch.sessionEvents !== false, inputs);
      await insertRows(database.sql, built, batch);
      return built.out;
    }
    await database.sql.begin(async (tx) => {
      if (batch) await prepareBatch(tx, batch, inputs);
      await holdAll(tx, built.newActive, max);
      await insertRows(tx, built);
    });
    return built.out;
  }
  return database.sql.begin(async (tx) => {
    // The batch first: an append waits here for another append to the same batch. Its ids are
    // made only then, after the batch's greatest: parts commit in the order of their ids, so a
    // results reader's `?after=` never passes a session committed later (ordered-ids.ts).
    await prepareBatch(tx, batch, inputs);
    const [last] = await tx<{ id: string | null }[]>`
      select max(id) as id from sessions where batch_id = ${batch.id}`;
    const built = await rows(orderedIds(inputs.length, Date.now(), last?.id ?? null));
    await holdAll(tx, built.newActive, max);
    await insertRows(tx, built);
    return built.out;
  });
}

/** Holds the tenants' active-session slots, tenants in one order so two requests never wait on each other. */
async function holdAll(
  tx: postgres.TransactionSql,
  newActive: ReadonlyMap<string, number>,
  max: number | undefined,
): Promise<void> {
  if (max === undefined) return;
  for (const [tenant, adding] of [...newActive].sort(([a], [b]) => (a < b ? -1 : 1)))
    await holdActiveSessions(tx, tenant, adding, max);
}

/** A session's first queued run, as the insert reads it. */
type NewRunRow = {
  id: string;
  session_id: string;
  tenant: string;
  batch_id: string | null;
  input: string;
  job_id: string;
};

type NewRows = {
  out: { id: string; runId: string | null }[];
  sessionRows: unknown[];
  runRows: NewRunRow[];
  /** Up to 50,000 messages (16 MiB) as JSON, made a slice of rows a turn of the event loop. */
  messagesJson: string;
  /** New queued runs per tenant. */
  newActive: Map<string, number>;
};

/** The rows of the sessions `inputs`, the i-th with `ids[i]` unless it names its own. */
async function newRows(
  inputs: readonly NewSession[],
  ids: readonly string[],
  batch: BatchTarget | undefined,
): Promise<NewRows> {
  const out: { id: string; runId: string | null }[] = [];
  const sessionRows: unknown[] = [];
  const messageRows: unknown[] = [];
  const runRows: NewRunRow[] = [];
  for (const [i, input] of inputs.entries()) {
    const id = input.id ?? ids[i]!;
    const history = input.messages ?? [];
    const tenant = input.tenant ?? DEFAULT_TENANT;
    sessionRows.push({
      id,
      tenant,
      agent: input.agent,
      metadata: input.metadata ?? {},
      last_seq: history.length,
      tail_state: tailState(history),
      tokens_used: importedTokens(history) + (input.spentOutside?.tokens ?? 0),
      model_calls: addCalls(importedCalls(history), input.spentOutside?.modelCalls ?? 0),
      history_bytes: historyBytes(history),
      history_bytes_seq: history.length,
      batch_id: batch?.id ?? null,
      custom_id: input.customId ?? null,
      // A batch's sessions take the batch's setting (a new batch's is known here; an open
      // batch's is read in the insert), unless they turn their own stream off.
      session_events: !batch
        ? input.sessionEvents !== false
        : input.sessionEvents === false
          ? false
          : batch.create
            ? batch.sessionEvents !== false
            : null,
    });
    for (const row of toNewRows(history, 0, null)) messageRows.push({ ...row, session_id: id });
    let runId: string | null = null;
    if (input.input !== undefined) {
      runId = randomUUID();
      runRows.push({
        id: runId,
        session_id: id,
        tenant,
        batch_id: batch?.id ?? null,
        input: input.input,
        job_id: QUEUES.runs.jobId({ sessionId: id, runId }),
      });
    }
    out.push({ id, runId });
  }
  const newActive = new Map<string, number>();
  for (const run of runRows) newActive.set(run.tenant, (newActive.get(run.tenant) ?? 0) + 1);
  return { out, sessionRows, runRows, messagesJson: await stringifyInSlices(messageRows), newActive };
}

/**
 * The sessions, their messages and runs in one statement, so one round trip and all-or-nothing;
 * foreign keys are checked at its end. `newBatch`: the batch's row goes in the same statement
 * (its sessions' setting is in their rows).
 */
function insertRows(sql: postgres.Sql | postgres.TransactionSql, rows: NewRows, newBatch?: BatchTarget) {
  return sql`
    with ${newBatch ? sql`nb as (${batchInsert(sql, newBatch)} returning 1),` : sql``} s as (
      insert into sessions (id, tenant, agent, metadata, last_seq, tail_state, tokens_used, model_calls, batch_id, custom_id,
                            session_events, history_bytes, history_bytes_seq)
      select x.id, x.tenant, x.agent, x.metadata, x.last_seq, x.tail_state, x.tokens_used, x.model_calls, x.batch_id,
             x.custom_id, coalesce(x.session_events, (select b.session_events from batches b where b.id = x.batch_id), true),
             x.history_bytes, x.history_bytes_seq
        from jsonb_to_recordset(${JSON.stringify(rows.sessionRows)}::jsonb)
          as x(id text, tenant text, agent jsonb, metadata jsonb, last_seq int, tail_state text, tokens_used bigint,
               model_calls int, batch_id text, custom_id text, session_events boolean, history_bytes bigint,
               history_bytes_seq int)
      returning 1
    ), m as (
      insert into messages (session_id, seq, role, content, tool_calls, tool_call_id, call_seq, name, success, stop_reason, usage, provider_state, created_at)
      select m.session_id, m.seq, m.role, m.content, m.tool_calls, m.tool_call_id, m.call_seq, m.name, m.success, m.stop_reason, m.usage, m.provider_state,
             coalesce(m.created_at, now())
        from jsonb_to_recordset(${rows.messagesJson}::jsonb) as m(
          session_id text, seq int, role text, content text, tool_calls jsonb, tool_call_id text, call_seq int,
          name text, success boolean, stop_reason text, usage jsonb, provider_state jsonb, created_at timestamptz)
      returning 1
    )
    insert into runs (id, session_id, tenant, batch_id, kind, trigger, input, job_id)
    select r.id, r.session_id, r.tenant, r.batch_id, 'run', 'api', r.input, r.job_id
      from jsonb_to_recordset(${JSON.stringify(rows.runRows)}::jsonb)
        as r(id text, session_id text, tenant text, batch_id text, input text, job_id text)`;
}

/** The insert of a new batch's row. */
function batchInsert(sql: postgres.Sql | postgres.TransactionSql, batch: BatchTarget) {
  return sql`insert into batches (id, tenant, webhook_url, open, session_events)
             values (${batch.id}, ${batch.tenant}, ${batch.webhookUrl ?? null}, ${batch.open},
                     ${batch.sessionEvents !== false})`;
}

/**
 * Why a batch takes no more sessions (pure): a cancel closed it (the caller of an open batch
 * that never closed it was told only "is closed"), or its last part or its creation did.
 */
export function closedBatchMessage(id: string, cancelled: boolean): string {
  return cancelled
    ? `batch ${id} was cancelled, which closed it; it takes no more sessions: send them in a new batch`
    : `batch ${id} is closed (its last part was sent with close: true, or it was created without open: true); it takes no more sessions`;
}

/**
 * Inserts a new batch, or locks an open one of the tenant for an append and refuses a
 * `customId` it already holds (400 naming `sessions[i].customId`); closes it when asked.
 */
async function prepareBatch(
  tx: postgres.TransactionSql,
  batch: BatchTarget,
  inputs: readonly NewSession[],
): Promise<void> {
  if (batch.create) {
    refuseStreams(batch.sessionEvents !== false, inputs);
    await batchInsert(tx, batch);
    return;
  }
  const [row] = await tx<{ open: boolean; session_events: boolean; cancelled: boolean }[]>`
    select open, session_events, cancelled_at is not null as cancelled from batches
     where id = ${batch.id} and tenant = ${batch.tenant} and deleted_at is null for update`;
  if (!row) throw new NotFoundError(`batch ${batch.id}`);
  if (!row.open) throw new ConflictError("batch_closed", closedBatchMessage(batch.id, row.cancelled));
  refuseStreams(row.session_events, inputs);
  const ids = inputs.flatMap((input) => (input.customId === undefined ? [] : [input.customId]));
  if (ids.length > 0) {
    const taken = await tx<{ custom_id: string }[]>`
      select custom_id from sessions
       where batch_id = ${batch.id}
         and custom_id in (select jsonb_array_elements_text(${JSON.stringify(ids)}::jsonb))`;
    if (taken.length > 0) {
      const held = new Set(taken.map((t) => t.custom_id));
      const i = inputs.findIndex((input) => input.customId !== undefined && held.has(input.customId));
      throw new ValidationError(
        `sessions[${i}].customId`,
        `batch ${batch.id} already has a session with customId ${JSON.stringify(inputs[i]!.customId)}`,
      );
    }
  }
  if (!batch.open) await tx`update batches set open = false where id = ${batch.id}`;
}
