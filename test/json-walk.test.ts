/**
 * json-walk.ts: the one walk every request body's checks use — document order, the path of
 * what it stops at, skipped containers, own `__proto__` keys, and any nesting depth.
 */
import { describe, expect, it } from "vitest";
import { findInJson } from "../src/shared/json-walk.js";
import { unstorableField } from "../src/shared/messages.js";

describe("findInJson", () => {
  it("visits in document order and returns the path of the value it stops at", () => {
    const seen: unknown[] = [];
    const value = { a: [1, { b: "x" }], c: 2 };
    const path = findInJson(value, (item, key, depth) => {
      seen.push([key, depth]);
      return item === "x" ? "stop" : undefined;
    });
    expect(path).toEqual(["a", 1, "b"]);
    expect(seen).toEqual([
      [null, 0],
      ["a", 1],
      [0, 2],
      [1, 2],
      ["b", 3],
    ]);
    expect(findInJson(value, () => undefined)).toBeUndefined();
    expect(findInJson("x", () => "stop")).toEqual([]);
  });

  it("a skipped container's children are not visited; its siblings are", () => {
    const visited: unknown[] = [];
    findInJson({ skip: { deep: 1 }, keep: { deep: 2 } }, (_item, key) => {
      visited.push(key);
      return key === "skip" ? "skip" : undefined;
    });
    expect(visited).toEqual([null, "skip", "keep", "deep"]);
  });

  it("the path a visit asks for names the value being visited", () => {
    const paths: unknown[] = [];
    findInJson({ a: { b: [true] } }, (_item, _key, _depth, path) => {
      paths.push(path());
      return undefined;
    });
    expect(paths).toEqual([[], ["a"], ["a", "b"], ["a", "b", 0]]);
  });

  it("reads an own __proto__ key as JSON.parse makes it", () => {
    const value = JSON.parse('{"__proto__": {"x": "\\u0000"}}');
    expect(unstorableField(value, "body")).toBe("body.__proto__.x");
  });

  it("walks any nesting depth without recursion", () => {
    const depth = 1_000_000;
    const value = JSON.parse(`${"[".repeat(depth)}"\\u0000"${"]".repeat(depth)}`);
    const path = findInJson(value, (item) => (typeof item === "string" ? "stop" : undefined));
    expect(path).toHaveLength(depth);
  });
});

describe("unstorableField", () => {
  it("names the first string or key that cannot be stored, in document order", () => {
    expect(unstorableField({ a: "ok", b: ["ok", "bad\u0000"] }, "metadata")).toBe("metadata.b[1]");
    expect(unstorableField({ "k\uD800": 1 }, "metadata")).toBe('metadata["k\\ud800"]');
    expect(unstorableField({ a: "\u0000" }, "")).toBe("a");
    expect(unstorableField({ a: ["fine", { b: "😀" }] }, "x")).toBeUndefined();
  });
});
