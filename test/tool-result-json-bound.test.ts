/**
 * A tool (plain JavaScript, loosely typed) that returns a huge object, not a string: its JSON
 * is written only as far as the stored result goes (MAX_TOOL_RESULT_CHARS), then cut with a
 * note. Before, the whole object went through JSON.stringify and the string was cut after:
 * 3 million rows (~120 MB of JSON) held the worker's event loop for seconds and took hundreds
 * of MB of heap — every other run on the worker and its leases waiting — and an object whose
 * JSON passed V8's longest string (~512 MB) was answered "Invalid string length" after all that.
 * What is kept is JSON.stringify's text, the same characters, for any value.
 */
import { describe, expect, it } from "vitest";
import { MAX_TOOL_RESULT_CHARS, resultContent } from "../src/worker/tools/execute-tool.js";

const NOTE =
  "\n[truncated: the tool's result, as JSON, is longer than 1,000,000 characters; the first 1,000,000 are kept]";

/** `count` rows as a database driver returns them. */
const rows = (count: number) =>
  Array.from({ length: count }, (_, i) => ({ id: i, name: `row ${i}`, tags: ["a", "b"], at: null }));

describe("a tool's result that is a huge object", () => {
  it("keeps the first MAX_TOOL_RESULT_CHARS of its JSON, with a note, without writing the rest", () => {
    const value = rows(3_000_000);
    const started = performance.now();
    const content = resultContent(value);
    const tookMs = performance.now() - started;
    // Synchronous: the event loop is held this long.
    console.log(`3,000,000 rows made into a tool result in ${tookMs.toFixed(0)} ms`);
    const expected = JSON.stringify(value.slice(0, 40_000)).slice(0, MAX_TOOL_RESULT_CHARS);
    expect(content.slice(0, MAX_TOOL_RESULT_CHARS)).toBe(expected);
    expect(content.slice(MAX_TOOL_RESULT_CHARS)).toBe(NOTE);
  }, 120_000);

  it("writes JSON.stringify's very text for any value that fits", () => {
    const date = new Date(0);
    const nested = { toJSON: (key: string) => `key:${key}` };
    const getter = Object.defineProperty({ a: 1 }, "b", { get: () => [2, undefined], enumerable: true });
    const values: unknown[] = [
      { a: 1, b: "two", c: [1, null, undefined, () => 1, Symbol("s")], d: undefined, e: () => 1 },
      { nested, list: [nested, date], date },
      [Number.NaN, Number.POSITIVE_INFINITY, -0, 1e21, 0.1],
      { s: 'quote " backslash \\ newline \n tab \t nul \0 lone \ud800 pair 😀 é' },
      [new Number(3), new String("s"), new Boolean(false)],
      new Map([[1, 2]]),
      Object.assign(Object.create({ inherited: 1 }), { own: 2 }),
      { [Symbol("k")]: 1, k: 2 },
      getter,
      Object.create(null),
      [[[[[]]]], {}],
      { toJSON: () => undefined },
      { x: { toJSON: () => undefined }, y: 1 },
      new Proxy({ p: 1 }, {}),
      Object.assign([1, 2], { extra: 3 }),
      // biome-ignore lint/suspicious/noSparseArray: a hole, as JSON.stringify sees it
      [1, , 3],
    ];
    for (const value of values)
      expect(resultContent(value), String(JSON.stringify(value))).toBe(
        JSON.stringify(value) ?? String(value),
      );
  });

  it("says why an array has no JSON rather than joining its every element", () => {
    const value: unknown[] = [1n, ...rows(1_000_000)];
    // Before: String(value), "1,[object Object],…", 16 MB joined then cut.
    expect(resultContent(value)).toBe(
      "(the tool's result cannot be shown as text: Do not know how to serialize a BigInt)",
    );
  });

  it("cuts a huge string inside an object without copying it whole", () => {
    const content = resultContent({ log: "x".repeat(50_000_000) });
    expect(content.startsWith(`{"log":"${"x".repeat(1000)}`)).toBe(true);
    expect(content.slice(MAX_TOOL_RESULT_CHARS)).toBe(NOTE);
  });
});
