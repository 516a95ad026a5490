/**
 * Which characters the console shows as their code points (console/src/invisible.ts; the
 * browser test in console-hostile-content.test.ts shows them on the page): the ones that
 * change how text reads without showing themselves, and not the ones text needs (tab,
 * newline, emoji presentation selectors, right-to-left letters themselves).
 */
import { describe, expect, it } from "vitest";
import { hasInvisible, revealed, revealedParts } from "../console/src/invisible.js";

describe("invisible characters in text from elsewhere", () => {
  it("writes bidi controls, zero-width, control and tag characters as their code points", () => {
    const cases: [string, string][] = [
      ["invoice\u202Efdp.exe", "invoice‹U+202E›fdp.exe"],
      ["\u202A\u202B\u202C\u202D", "‹U+202A›‹U+202B›‹U+202C›‹U+202D›"],
      ["\u2066a\u2067b\u2068c\u2069", "‹U+2066›a‹U+2067›b‹U+2068›c‹U+2069›"],
      ["r\u200Bm \u2060\uFEFF", "r‹U+200B›m ‹U+2060›‹U+FEFF›"],
      ["bell\u0007 esc\u001B del\u007F nel\u0085", "bell‹U+0007› esc‹U+001B› del‹U+007F› nel‹U+0085›"],
      ["soft\u00ADhyphen", "soft‹U+00AD›hyphen"],
      ["tag\u{E0041}\u{E007F}", "tag‹U+E0041›‹U+E007F›"],
      // Bytes hidden as variation selectors after a letter ("emoji smuggling").
      ["a\uFE00\u{E0100}\u{E01EF}", "a‹U+FE00›‹U+E0100›‹U+E01EF›"],
    ];
    for (const [text, shown] of cases) {
      expect(revealed(text), JSON.stringify(text)).toBe(shown);
      expect(hasInvisible(text)).toBe(true);
    }
  });

  it("leaves text without them as it is", () => {
    const joined = ["👩\u200D💻", "👨\u200D👩\u200D👧", "می\u200Cخواهم", "क्\u200Dष"];
    const marked = ["שלום\u200F.", "abc\u200E!", "\u061C١٢"];
    for (const text of [
      "plain",
      "tab\tnew\nline\r\n",
      "שלום עולם",
      "مرحبا",
      "❤️ ☺︎",
      "𝔘𝔫𝔦",
      "",
      ...joined,
      ...marked,
    ]) {
      expect(revealed(text)).toBe(text);
      expect(revealedParts(text)).toEqual([text]);
    }
  });

  it("cuts text into its visible runs and marks, the same on every call", () => {
    const parts = [{ mark: "‹U+202E›" }, "abc", { mark: "‹U+200B›" }, "d", { mark: "‹U+202C›" }];
    // Twice: a regular expression that kept its place between calls missed the second time.
    for (let i = 0; i < 2; i++) expect(revealedParts("\u202Eabc\u200Bd\u202C")).toEqual(parts);
  });
});
