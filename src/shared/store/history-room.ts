/**
 * A session's room for a new message (README "Limits that always hold"): its stored history,
 * with the input of its runs still waiting to start, holds at most `max` bytes (the API's
 * MAX_HISTORY_BYTES, about 32 MiB, in the measure of history-bytes.ts), the bound an imported
 * history is held to. Every reader of a session holds all of it — a whole GET, the worker
 * that runs it, its event stream — and new messages grew it without end where an import of
 * the same size was refused. Checked in the transaction that queues the run, after the
 * session row is locked (run-queueing.ts), so racing sends cannot together pass it.
 */
import type postgres from "postgres";
import { ConflictError } from "../errors.js";
import { heldBytes } from "./history-bytes.js";

const mebibytes = (bytes: number) => (bytes / 1024 / 1024).toFixed(1).replace(/\.0$/, "");

/**
 * Refuses (ConflictError `history_full`) `input` for `sessionId` when the stored history, the
 * input of its runs not yet started (a run starts by storing its input) and `input` together
 * pass `max` bytes. `row`: the session's row, read under its lock.
 */
export async function checkHistoryRoom(
  tx: postgres.TransactionSql,
  sessionId: string,
  row: { history_bytes: string | number; history_bytes_seq: number; last_seq: number },
  input: string,
  max: number,
): Promise<void> {
  const held = await heldBytes(tx, sessionId, row);
  const [queued] = await tx<{ bytes: string }[]>`
    select coalesce(sum(octet_length(input)), 0)::text as bytes from runs
     where session_id = ${sessionId} and status = 'queued' and kind = 'run' and started_at is null`;
  const waiting = held + Number(queued!.bytes);
  const adding = Buffer.byteLength(input, "utf8");
  if (waiting + adding <= max) return;
  throw new ConflictError(
    "history_full",
    `session ${sessionId} holds about ${mebibytes(waiting)} MiB with the messages waiting to run; ` +
      `this message (${adding.toLocaleString("en")} bytes) would bring it past the ${mebibytes(max)} MiB ` +
      "a session's history may hold (no model could be sent more): continue in a new session",
  );
}
