/**
 * sanitize-text.ts: what Postgres cannot store (NUL, lone surrogates) becomes U+FFFD; all
 * else, valid surrogate pairs included, is kept, and a clean value is returned uncopied.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { REPLACEMENT_CHARACTER, sanitizeJson, sanitizeText } from "../src/worker/models/sanitize-text.js";

const R = REPLACEMENT_CHARACTER;

/** Independent oracle: UTF-8 encoding replaces each lone surrogate by U+FFFD; then NUL. */
const oracle = (s: string) => Buffer.from(s, "utf8").toString("utf8").replaceAll("\u0000", R);

/** Strings rich in the code units that matter, mixed with arbitrary code points. */
const nastyString = fc.string({
  unit: fc.oneof(
    fc.constantFrom("\u0000", "\uD800", "\uDBFF", "\uDC00", "\uDFFF", "\uD83D", "\uDE00", "😀", "a", R),
    fc.string({ unit: "binary", minLength: 1, maxLength: 1 }),
  ),
  maxLength: 30,
});

describe("sanitizeText", () => {
  it("replaces NUL with U+FFFD", () => {
    expect(sanitizeText("bin\u0000ary")).toBe(`bin${R}ary`);
    expect(sanitizeText("\u0000\u0000")).toBe(R + R);
  });

  it("replaces a lone high surrogate, at the end or followed by anything but a low one", () => {
    expect(sanitizeText("abc\uD83D")).toBe(`abc${R}`);
    expect(sanitizeText("\uD83Dx")).toBe(`${R}x`);
    expect(sanitizeText("\uD83D\uD83D")).toBe(R + R);
  });

  it("replaces a lone low surrogate, at the start or after anything but a high one", () => {
    expect(sanitizeText("\uDE00xyz")).toBe(`${R}xyz`);
    expect(sanitizeText("x\uDE00")).toBe(`x${R}`);
    expect(sanitizeText("\uDE00\uDE00")).toBe(R + R);
  });

  it("keeps valid surrogate pairs, also next to lone surrogates", () => {
    expect(sanitizeText("abc😀xyz")).toBe("abc😀xyz");
    expect(sanitizeText("\uD83D😀")).toBe(`${R}😀`);
    expect(sanitizeText("😀\uDE00")).toBe(`😀${R}`);
  });

  it("returns the very same string when nothing needs replacing", () => {
    const s = "plain text, ünïcödé, 😀, \uFFFD, tabs\tand\nnewlines";
    expect(sanitizeText(s)).toBe(s);
    expect(sanitizeText("")).toBe("");
  });

  it("matches the UTF-8 round trip with NUL replaced, for any string (property)", () => {
    fc.assert(
      fc.property(nastyString, (s) => {
        const clean = sanitizeText(s);
        expect(clean).toBe(oracle(s));
        expect(clean).toHaveLength(s.length); // one U+FFFD per bad code unit
        expect(sanitizeText(clean)).toBe(clean); // idempotent
      }),
    );
  });
});

describe("sanitizeJson", () => {
  it("sanitises every string of nested arguments, keys included", () => {
    const args = {
      path: "a\u0000b",
      "k\uD800": 1,
      nested: { list: ["ok", "\uDC00x", { deep: "😀\uD83D" }], n: 3, t: true, z: null },
    };
    expect(sanitizeJson(args)).toEqual({
      path: `a${R}b`,
      [`k${R}`]: 1,
      nested: { list: ["ok", `${R}x`, { deep: `😀${R}` }], n: 3, t: true, z: null },
    });
  });

  it("does not modify its input, and copies only what changed", () => {
    const untouched = { a: ["x"] };
    const args = { clean: untouched, dirty: "\u0000" };
    const before = structuredClone(args);
    const out = sanitizeJson(args);
    expect(args).toEqual(before);
    expect(out).not.toBe(args);
    expect(out.clean).toBe(untouched);
  });

  it("returns the very same value when nothing needs replacing", () => {
    const args = { path: "a", list: [1, "😀", { x: null }], flag: false };
    expect(sanitizeJson(args)).toBe(args);
    expect(sanitizeJson("s")).toBe("s");
    expect(sanitizeJson(7)).toBe(7);
    expect(sanitizeJson(null)).toBe(null);
  });

  it("keeps key order and keeps `__proto__` an ordinary key", () => {
    const args = JSON.parse('{"first":"\\u0000","__proto__":{"polluted":true},"last":1}');
    const out = sanitizeJson(args) as Record<string, unknown>;
    expect(Object.keys(out)).toEqual(["first", "__proto__", "last"]);
    expect(Object.getPrototypeOf(out)).toBe(Object.prototype);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(JSON.stringify(out)).toBe(`{"first":"${R}","__proto__":{"polluted":true},"last":1}`);
  });

  it("leaves no NUL or lone surrogate anywhere in a JSON value (property)", () => {
    const json = fc.letrec((tie) => ({
      value: fc.oneof(
        { depthSize: "small" },
        nastyString,
        fc.integer(),
        fc.boolean(),
        fc.constant(null),
        fc.array(tie("value"), { maxLength: 4 }),
        fc.dictionary(nastyString, tie("value"), { maxKeys: 4 }),
      ),
    })).value;
    fc.assert(
      fc.property(json, (value) => {
        // JSON.stringify writes NUL and lone surrogates (and only those of them) as \u escapes.
        const text = JSON.stringify(sanitizeJson(value));
        expect(text).not.toMatch(/\\u0000|\\ud[89a-f][0-9a-f]{2}/i);
      }),
    );
  });
});
