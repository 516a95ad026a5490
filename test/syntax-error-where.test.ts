/** The line `fleet worker` adds to a module's SyntaxError, from `node --check`'s output. */
import { describe, expect, it } from "vitest";
import { syntaxErrorWhere } from "../src/commands/syntax-error-where.js";

describe("syntaxErrorWhere", () => {
  it("names the line and its text", () => {
    const stderr = "/tmp/t.mjs:2\n  { a: 1 ,,\n          ^\n\nSyntaxError: Unexpected token ','\n";
    expect(syntaxErrorWhere(stderr)).toBe(" at line 2: { a: 1 ,,");
  });

  it("cuts a long line, and says the line alone when its text is blank", () => {
    const long = "x".repeat(200);
    expect(syntaxErrorWhere(`/tmp/t.mjs:7\n${long}\n^\n`)).toBe(` at line 7: ${"x".repeat(120)}…`);
    expect(syntaxErrorWhere("/tmp/t.mjs:3\n   \n^\n")).toBe(" at line 3");
  });

  it("adds nothing when the output names no line (the file parses; a module it imports did not)", () => {
    expect(syntaxErrorWhere("")).toBe("");
    expect(syntaxErrorWhere("node: bad option: --check\n")).toBe("");
  });
});
