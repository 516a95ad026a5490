/**
 * `fleet batch submit --help` says what a line of the file may hold as the README does: it
 * said `{customId?, agent, input}`, leaving out `metadata`, `messages` and `sessionEvents`,
 * which the command sends and the README lists, so a reader of `--help` alone did not know a
 * batch's sessions could carry metadata or an imported history.
 */
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { buildProgram } from "../src/commands/program.js";

const ROOT = resolve(import.meta.dirname, "..");

describe("fleet batch submit --help and the README", () => {
  it("name the same fields of a line", () => {
    const readme = readFileSync(join(ROOT, "README.md"), "utf8").replace(/\s+/g, " ");
    const documented = /`submit` reads the file line by line \(one `(\{[^`]+\})` per line/.exec(readme)?.[1];
    expect(documented).toContain("metadata?");
    const batch = buildProgram().program.commands.find((c) => c.name() === "batch")!;
    const submit = batch.commands.find((c) => c.name() === "submit")!;
    const help = submit.helpInformation().replace(/\s+/g, " ");
    expect(help).toContain(`(one ${documented} per line;`);
  });
});
