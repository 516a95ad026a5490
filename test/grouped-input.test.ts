/**
 * The grouped appends' input (grouped-appends.ts `groupedInput`): per append, the fields the
 * statements' `jsonb_to_recordset` reads, each once. The statements themselves (what is stored,
 * fenced and answered) are tested against Postgres in test/group-commit.test.ts.
 */
import { describe, expect, it } from "vitest";
import { type EndingAppend, groupedInput, type SessionAppend } from "../src/shared/store/grouped-appends.js";

const append: SessionAppend = {
  sessionId: "s1",
  epoch: 3,
  lastSeq: 7,
  tail: "awaiting_model",
  tokens: 12,
  bytes: 2,
  runId: "r1",
  rows: [{ seq: 8, role: "tool", content: "ok", tool_call_id: "c1", name: "sleep", success: true }] as never,
};

/** The columns the statements declare for `i` (appendsTogether, endingAppendsTogether). */
const COLUMNS = ["k", "session_id", "epoch", "last_seq", "tail", "tokens", "bytes", "run_id", "rows"];
const ENDING_COLUMNS = [...COLUMNS, "outcome", "error", "usage", "park"];

describe("groupedInput", () => {
  it("gives each mid-run append exactly the statement's columns, with its values", () => {
    const [row] = JSON.parse(groupedInput([append])) as Record<string, unknown>[];
    expect(Object.keys(row!)).toEqual(COLUMNS);
    expect(row).toEqual({
      k: 0,
      session_id: "s1",
      epoch: 3,
      last_seq: 7,
      tail: "awaiting_model",
      tokens: 12,
      bytes: 2,
      run_id: "r1",
      rows: append.rows,
    });
  });

  it("gives a run's last append and end the ending columns too, numbered in order", () => {
    const ending: EndingAppend = {
      ...append,
      sessionId: "s2",
      runId: "r2",
      outcome: "completed",
      error: null,
      usage: { inputTokens: 1, outputTokens: 2 },
      park: null,
    };
    const rows = JSON.parse(groupedInput([append, ending])) as Record<string, unknown>[];
    expect(rows.map((r) => r.k)).toEqual([0, 1]);
    expect(Object.keys(rows[1]!)).toEqual(ENDING_COLUMNS);
    expect(rows[1]).toMatchObject({
      session_id: "s2",
      run_id: "r2",
      outcome: "completed",
      error: null,
      usage: { inputTokens: 1, outputTokens: 2 },
      park: null,
    });
  });
});
