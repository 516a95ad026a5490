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

describe("fleet keys revoke --help and the README", () => {
  it("name every form of key the command takes: the id, fk_<id>_… as listed, or the key itself", () => {
    // The help named only "the id `fleet keys list` shows": an operator holding just the key
    // (a FLEET_BOOTSTRAP_KEY, a leaked one) read that it could not be revoked as it was.
    const readme = readFileSync(join(ROOT, "README.md"), "utf8").replace(/\s+/g, " ");
    expect(readme).toContain("`revoke` takes the id, `fk_<id>_…` as listed, or the key itself");
    const keys = buildProgram().program.commands.find((c) => c.name() === "keys")!;
    const revoke = keys.commands.find((c) => c.name() === "revoke")!;
    const help = revoke.helpInformation().replace(/\s+/g, " ");
    expect(help).toContain("Usage: fleet keys revoke KEY_ID|KEY");
    expect(help).toContain("the id `fleet keys list` shows, `fk_<id>_…` as it lists it, or the key itself");
    expect(keys.helpInformation()).toContain("revoke KEY_ID|KEY");
  });
});
