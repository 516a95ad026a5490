/**
 * history-bound.ts's pure parts: a tool result cut to the room the history has left stays
 * within it in UTF-8 bytes (the measure history-bytes.ts counts), is cut at a character's
 * boundary (never half of a multi-byte character or of a surrogate pair: no U+FFFD), and says
 * how much of it was kept; one that fits is kept as it is.
 */
import { describe, expect, it } from "vitest";
import type { Message } from "../src/shared/messages.js";
import { CALL_RESERVE, fitResult, NOT_RUN_TEXT, RUN_ROOM, resultRoom } from "../src/worker/history-bound.js";

describe("fitResult", () => {
  it("keeps a result that fits as it is", () => {
    expect(fitResult("héllo", 6)).toEqual({ content: "héllo", cut: false });
  });

  it.each([
    ["ascii", "a"],
    ["two-byte", "é"],
    ["three-byte", "€"],
    ["surrogate pairs", "😀"],
  ])("cuts %s text within the room, at a character's boundary, with the note", (_, unit) => {
    const text = unit.repeat(5_000);
    for (const room of [RUN_ROOM, RUN_ROOM + 1, RUN_ROOM + 2, RUN_ROOM + 3, RUN_ROOM + 1_001]) {
      const { content, cut } = fitResult(text, room);
      expect(cut).toBe(true);
      expect(Buffer.byteLength(content, "utf8")).toBeLessThanOrEqual(room);
      expect(content).not.toContain("\uFFFD");
      const kept = content.slice(0, content.indexOf("\n[cut: "));
      expect(text.startsWith(kept)).toBe(true);
      expect(content).toContain(
        `[cut: the session's history had room for ${kept.length.toLocaleString("en")} of the tool's ${text.length.toLocaleString("en")} characters`,
      );
    }
  });
});

describe("resultRoom", () => {
  it("is what the bound leaves, less a short answer for each call after this one", () => {
    const history: Message[] = [{ role: "user", content: "x".repeat(100) }];
    expect(resultRoom(history, 0, 1_000)).toBe(900);
    expect(resultRoom(history, 3, 1_000)).toBe(900 - 3 * CALL_RESERVE);
    expect(Buffer.byteLength(NOT_RUN_TEXT, "utf8")).toBeLessThanOrEqual(CALL_RESERVE);
  });
});
