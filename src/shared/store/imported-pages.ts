/**
 * An imported history continued in pages (`POST /v1/sessions/:id/history`): a session created
 * with the first part of a long history (at most MAX_IMPORTED_MESSAGES in one request) takes
 * the rest a page at a time, while no run of it exists — so nothing runs until the import is
 * complete (the first message sent, or resume asked for, ends it).
 *
 * Each page is stored whole or not at all, and only right after the seq the caller names
 * (`afterSeq`, the session's `lastSeq`): a page sent twice (a retry after a lost answer) is
 * refused the second time with `409 seq_mismatch` rather than stored twice, and the caller
 * goes on from the `lastSeq` it reads back. The page is checked with what is stored before it:
 * a result may answer a call of the last stored step, but not a second time.
 *
 * A session of a batch marked deleted takes no page (404, as its batch): its data goes.
 *
 * And the history a session holds this way is bounded (`maxHistoryBytes`, about: its texts,
 * tool calls and provider state): one request is at most 16 MB, but pages could be added for
 * ever, and every later reader of the session (a whole `GET`, the worker's run, the event
 * stream written at its first run) holds all of it — 100 MB imported took an API 400 MB per
 * unpaged `GET` and wrote 110 MB into Redis at the first run.
 */
import type { Database } from "../db/client.js";
import { ConflictError, NotFoundError, ValidationError } from "../errors.js";
import { stringifyInSlices } from "../event-loop-slices.js";
import { resumePointOfTail, wellFormedBeforeTail } from "../history-tail.js";
import { importedCalls, MAX_MODEL_CALLS } from "../imported-spent.js";
import { assertAnsweredOnce, type Message } from "../messages.js";
import { resumePoint } from "../resume-point.js";
import { tailStateOf } from "../tail-state.js";
import { assertImportedUsage, importedTokens } from "../usage.js";
import { heldBytes, historyBytes } from "./history-bytes.js";
import { readShapeAndLastSeq, readShapeTail } from "./history-reads.js";
import { toNewRows } from "./rows.js";

export async function appendImportedPage(
  database: Database,
  tenant: string,
  sessionId: string,
  afterSeq: number,
  page: readonly Message[],
  maxHistoryBytes: number,
): Promise<{ lastSeq: number }> {
  return database.sql.begin(async (tx) => {
    const [session] = await tx<
      {
        last_seq: number;
        has_runs: boolean;
        tokens_used: string;
        history_bytes: string;
        history_bytes_seq: number;
        batch_id: string | null;
      }[]
    >`
      select s.last_seq, s.batch_id, s.tokens_used::text, s.history_bytes::text, s.history_bytes_seq,
             exists (select 1 from runs r where r.session_id = s.id) as has_runs
        from sessions s where s.id = ${sessionId} and s.tenant = ${tenant} for update`;
    if (!session) throw new NotFoundError(`session ${sessionId}`);
    // A session of a batch being deleted is gone for its caller, as for a new message
    // (run-queueing.ts): read after the row's lock, so a mark committed meanwhile is seen.
    if (session.batch_id !== null) {
      const [gone] =
        await tx`select 1 from batches where id = ${session.batch_id} and deleted_at is not null`;
      if (gone) throw new NotFoundError(`session ${sessionId}`);
    }
    if (session.has_runs)
      throw new ConflictError(
        "runs_exist",
        `session ${sessionId} has runs: an imported history is continued only before its first message or resume`,
      );
    if (session.last_seq !== afterSeq)
      throw new ConflictError(
        "seq_mismatch",
        `session ${sessionId} holds messages up to seq ${session.last_seq}, not ${afterSeq}: send the page that follows seq ${session.last_seq}`,
      );
    // The stored count (history-bytes.ts), not a sum of every stored message: that read the
    // whole history again at each page.
    const bytes = (await heldBytes(tx, sessionId, session)) + historyBytes(page);
    if (bytes > maxHistoryBytes)
      throw new ValidationError(
        "messages",
        `would bring session ${sessionId}'s imported history to about ${mebibytes(bytes)} MiB; it may hold at most ${mebibytes(maxHistoryBytes)} MiB (no model could be sent more)`,
      );
    assertImportedUsage(page, "messages", Number(session.tokens_used));
    // Seqs are contiguous from 1: the stored message at index i has seq i + 1. Only the stored
    // tail from the last assistant message is read: a result can answer no call before it, and
    // the stored tail state says whether the rest is well formed (every page read it whole:
    // importing 20,000 messages in pages read the history's shape again at each page).
    const tail = await readShapeTail(tx, sessionId);
    const wellFormed = wellFormedBeforeTail(tail.tailState, tail.lastSeq);
    const stored = wellFormed ? tail : { ...(await readShapeAndLastSeq(tx, sessionId)), start: 0 };
    const whole = [...stored.shape, ...page];
    assertAnsweredOnce(whole, "messages", stored.shape.length, stored.start);
    let lastStep: number | null = null;
    for (let i = stored.shape.length - 1; i >= 0 && lastStep === null; i--)
      if (stored.shape[i]!.role === "assistant") lastStep = stored.start + i + 1;
    const rows = toNewRows(page, afterSeq, lastStep).map((row) => ({ ...row, session_id: sessionId }));
    const tailState = tailStateOf(wellFormed ? resumePointOfTail(whole, tail.start) : resumePoint(whole));
    const lastSeq = afterSeq + page.length;
    await tx`
      insert into messages (session_id, seq, role, content, tool_calls, tool_call_id, call_seq, name, success, stop_reason, usage, provider_state, created_at)
      select m.session_id, m.seq, m.role, m.content, m.tool_calls, m.tool_call_id, m.call_seq, m.name, m.success,
             m.stop_reason, m.usage, m.provider_state, coalesce(m.created_at, now())
        from jsonb_to_recordset(${await stringifyInSlices(rows)}::jsonb) as m(
          session_id text, seq int, role text, content text, tool_calls jsonb, tool_call_id text, call_seq int,
          name text, success boolean, stop_reason text, usage jsonb, provider_state jsonb, created_at timestamptz)`;
    await tx`
      update sessions set last_seq = ${lastSeq}, tail_state = ${tailState},
                          tokens_used = tokens_used + ${importedTokens(page)}, updated_at = now(),
                          model_calls = least(model_calls::bigint + ${importedCalls(page)}, ${MAX_MODEL_CALLS}),
                          history_bytes = ${bytes}, history_bytes_seq = ${lastSeq}
       where id = ${sessionId}`;
    return { lastSeq };
  });
}

const mebibytes = (bytes: number) => (bytes / 1024 / 1024).toFixed(1).replace(/\.0$/, "");
