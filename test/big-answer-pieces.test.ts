/**
 * A big session's whole answer is written in pieces (src/producer/big-answers.ts), each
 * encoded to UTF-8 on its own: no piece may end inside a surrogate pair, and the pieces are the
 * text. The stall decision is pure: the progress mark unmoved for the stall time.
 */
import { describe, expect, it } from "vitest";
import { answerPieces, answerStalled } from "../src/producer/big-answers.js";

describe("a big answer's pieces", () => {
  it("are the text, and none ends with a high surrogate (a pair split across pieces became two U+FFFD)", () => {
    const text = `${"a".repeat(9)}😀${"b".repeat(7)}😀😀${"é".repeat(5)}`;
    for (const size of [2, 3, 4, 10, 11, 64 * 1024]) {
      const pieces = [...answerPieces(text, size)];
      expect(pieces.join(""), `size ${size}`).toBe(text);
      expect(Buffer.concat(pieces.map((p) => Buffer.from(p, "utf8"))).toString("utf8"), `size ${size}`).toBe(
        text,
      );
      for (const piece of pieces) {
        expect(piece.length).toBeGreaterThan(0);
        expect(piece.length).toBeLessThanOrEqual(size);
      }
    }
    expect([...answerPieces("")]).toEqual([]);
  });

  it("is stalled once its progress mark has not moved for the stall time", () => {
    const seen = { mark: "3:1:100", since: 1_000 };
    expect(answerStalled("3:1:100", seen, 1_999, 1_000)).toBe(false);
    expect(answerStalled("3:1:100", seen, 2_000, 1_000)).toBe(true);
    expect(answerStalled("4:1:100", seen, 5_000, 1_000)).toBe(false);
  });
});
