/**
 * A big session's whole answer is written in pieces (src/producer/big-answers.ts), each
 * encoded to UTF-8 on its own: no piece may end inside a surrogate pair, and the pieces are the
 * text. (Its stall rule is a batch's results': stalled-answers.ts.)
 */
import { describe, expect, it } from "vitest";
import { answerPieces } from "../src/producer/big-answers.js";

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
});
