/**
 * A session's resume point as the API answers it (contracts §2), and the stored history's own
 * (what an explicit resume decides on), each read without the messages' texts.
 */
import type postgres from "postgres";
import { resumePointOfTail, wellFormedBeforeTail } from "../history-tail.js";
import { type ResumePoint, type ResumePointJson, resumePoint, toResumePointJson } from "../resume-point.js";
import { hasUnendedRun, readShapeAndLastSeq, readShapeTail } from "./history-reads.js";
import { hasWaitingInputOnly, WAITING_INPUT_POINT } from "./waiting-input.js";

type Sql = postgres.Sql;

/**
 * `running` while a run of the session is queued or running, else `resumePoint` of its history
 * (`historyPoint`). A message waiting on a parked session (waiting-input.ts) is no one's work:
 * a resume starts it, and the model then answers it (`call_model`), unless the history is
 * malformed.
 */
export async function sessionResumePoint(
  sql: Sql,
  sessionId: string,
  tenant?: string,
): Promise<ResumePointJson> {
  if (await hasUnendedRun(sql, sessionId, tenant)) {
    if (!(await hasWaitingInputOnly(sql, sessionId))) return { resumable: false, reason: "running" };
    const { point } = await historyPoint(sql, sessionId);
    if (!point.resumable && point.reason === "malformed") return toResumePointJson(point);
    return toResumePointJson(WAITING_INPUT_POINT);
  }
  return toResumePointJson((await historyPoint(sql, sessionId)).point);
}

/**
 * `resumePoint` of the stored history, read without its texts (readShapeTail: its tail alone
 * when the stored tail state says the rest is well formed, else readShapeAndLastSeq), and the
 * highest seq stored: what an explicit resume decides on, whatever the history's size.
 */
export async function historyPoint(
  sql: Sql,
  sessionId: string,
): Promise<{ point: ResumePoint; lastSeq: number }> {
  // The tail (from the last assistant message) decides when the rest is known well formed;
  // else (a malformed history, whose detail names where) the whole shape is read.
  const tail = await readShapeTail(sql, sessionId);
  if (wellFormedBeforeTail(tail.tailState, tail.lastSeq))
    return { point: resumePointOfTail(tail.shape, tail.start), lastSeq: tail.lastSeq };
  const { shape, lastSeq } = await readShapeAndLastSeq(sql, sessionId);
  return { point: resumePoint(shape), lastSeq };
}
