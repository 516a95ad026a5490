/**
 * A `--tools` module that gives no tools says, on one line and with exit code 2, what it found
 * and what is expected: an empty module, one with named exports and no default, an empty
 * array, and a CommonJS module (whose `module.exports` is what the worker reads) that is empty
 * or set properties of `exports`. Before, the first two said only "exports no tools (export
 * default [tool, ...])", and the CommonJS ones "tool 0 has no name", which named no cause. A
 * CommonJS module whose module.exports is a tool still loads. The worker is pointed at a
 * database that does not exist: it loads its modules first, so reaching that check proves
 * the module loaded.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runFleetCli } from "./support/fleet-cli.js";

const env = {
  DATABASE_URL: "postgres://postgres@127.0.0.1:5432/fleet_tools_module_exports_missing",
  FLEET_PREFIX: "tools-module-exports",
};
const TOOL =
  '{ name: "lookup", description: "d", parameters: { type: "object" }, async run() { return "ok"; } }';
const ESM =
  "expected export default [defineTool({ name, description, parameters, run }), ...] (a tool or an array of tools)";
const CJS =
  "expected module.exports = [{ name, description, parameters, run }, ...] (a tool or an array of tools), or an ES module with export default";

describe("a --tools module that gives no tools", () => {
  let dir: string;
  beforeAll(async () => {
    // No package.json above it with "type": "module": a .js file there is CommonJS.
    dir = await mkdtemp(join(tmpdir(), "fleet-tools-exports-"));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it.each([
    ["empty.mjs", "", ` is empty: it exports nothing; ${ESM}`],
    [
      "named.mjs",
      `export const lookup = ${TOOL};\nexport const version = 2;\n`,
      ` has no default export (it exports only lookup, version); ${ESM}`,
    ],
    ["none.mjs", "export default [];\n", `: its default export is an empty array; ${ESM}`],
    ["empty.cjs", "", ` is CommonJS and sets nothing on module.exports; ${CJS}`],
    ["empty.js", "// nothing yet\n", ` is CommonJS and sets nothing on module.exports; ${CJS}`],
    [
      "named.js",
      `exports.lookup = ${TOOL};\n`,
      ` is CommonJS and its module.exports is an object of lookup, not a tool (it has no name); ${CJS}`,
    ],
    ["array.cjs", "module.exports = [];\n", `: its module.exports is an empty array; ${CJS}`],
  ])(
    "%s: one line saying what it found and what is expected, exit 2",
    async (name, source, said) => {
      const file = join(dir, name);
      await writeFile(file, source);
      const result = await runFleetCli(["worker", "--tools", file], env, 60_000);
      expect(result.stderr).toBe(`fleet worker: --tools: ${file}${said}\n`);
      expect(result.code).toBe(2);
    },
    60_000,
  );

  it("a CommonJS module whose module.exports is a tool (or an array of them) loads", async () => {
    for (const [name, source] of [
      ["one.cjs", `module.exports = ${TOOL};\n`],
      ["many.js", `module.exports = [${TOOL}];\n`],
    ]) {
      const file = join(dir, name!);
      await writeFile(file, source!);
      const result = await runFleetCli(["worker", "--tools", file], env, 60_000);
      expect(result.stderr, name).toMatch(/^fleet worker: DATABASE_URL: .*does not exist/);
      expect(result.code, name).toBe(2);
    }
  }, 120_000);

  it('an ES module in a .js file outside a `"type": "module"` package loads, as Node itself loads it', async () => {
    // Node (20.19 and later) reads such a file as an ES module by its syntax. Run from a checkout's
    // sources (through tsx, bin/fleet.js), the worker said `could not be loaded: Cannot require()
    // ES Module … in a cycle`, exit 1, for a module `node` imports as it is.
    const file = join(dir, "esm.js");
    await writeFile(file, `export default [${TOOL}];\r\n`);
    const result = await runFleetCli(["worker", "--tools", file], env, 60_000);
    expect(result.stderr).toMatch(/^fleet worker: DATABASE_URL: .*does not exist/);
    expect(result.code).toBe(2);
    // Its syntax errors are said with where they are, as a CommonJS module's.
    const broken = join(dir, "broken.js");
    await writeFile(broken, `export default [${TOOL},,\n`);
    const failed = await runFleetCli(["worker", "--tools", broken], env, 60_000);
    expect(failed.stderr).toMatch(new RegExp(`^fleet worker: --tools: ${broken} could not be loaded: `));
    expect(failed.stderr).not.toContain("in a cycle");
    expect(failed.code).toBe(1);
  }, 120_000);
});
