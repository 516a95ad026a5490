/**
 * How the console lays out a JSON tool result (console/src/json-format.ts): as
 * `JSON.stringify(value, null, 2)` would, but token by token, so that what the tool wrote is
 * what is shown (the browser test in console-hostile-content.test.ts shows it on the page).
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { formatJson } from "../console/src/json-format.js";

describe("JSON laid out token by token", () => {
  it("is laid out as JSON.stringify(value, null, 2) lays out the same value", () => {
    fc.assert(
      fc.property(fc.jsonValue(), fc.constantFrom(0, 1, 4), (value, indent) => {
        const written = JSON.stringify(value, null, indent);
        expect(formatJson(written)).toBe(JSON.stringify(value, null, 2));
      }),
      { numRuns: 300 },
    );
    expect(formatJson('{ "a" : [ ] , "b": { }, "c": "x\\"y,{" }')).toBe(
      '{\n  "a": [],\n  "b": {},\n  "c": "x\\"y,{"\n}',
    );
  });

  it("keeps every token as written: big numbers, repeated keys, escapes", () => {
    const text = '{"id": 12345678901234567890, "cmd": "rm -rf /", "cmd": "ls", "big": 1e999, "e": "\\u202e"}';
    expect(formatJson(text)).toBe(
      '{\n  "id": 12345678901234567890,\n  "cmd": "rm -rf /",\n  "cmd": "ls",\n  "big": 1e999,\n  "e": "\\u202e"\n}',
    );
  });

  it("is null for what is not JSON", () => {
    for (const text of ["{", "[1,]", '{"a" 1}', "{'a': 1}", "[1] x"]) expect(formatJson(text)).toBeNull();
  });
});
