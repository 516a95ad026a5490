/**
 * The README's `--tools` and `--extensions` examples as a new user writes them: TypeScript that
 * imports `defineTool` / `defineExtension` from "agent-fleet", in a project `npm init -y` made
 * (`"type": "commonjs"`). tsx compiles such a file as CommonJS, so its import becomes
 * `require("agent-fleet")`, which the package answers with esm-only.cjs's error: before, the
 * worker stopped with `fleet: --tools: my-tools.ts could not be loaded: agent-fleet is an ES
 * module …` (exit 1). The worker is pointed at a database that does not exist: it loads its
 * modules first, so reaching that check proves they loaded.
 */
import { readFileSync } from "node:fs";
import { mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runFleetCli } from "./support/fleet-cli.js";
import { ROOT } from "./support/fleet-env.js";

const env = {
  DATABASE_URL: "postgres://postgres@127.0.0.1:5432/fleet_tools_import_package_missing",
  FLEET_PREFIX: "tools-import-package",
};

/** The README's own examples, as a reader copies them. */
const readme = readFileSync(join(ROOT, "README.md"), "utf8");
const TOOLS = /```ts\n(\/\/ my-tools\.ts[\s\S]*?)```/.exec(readme)?.[1];
const EXTENSION = /```ts\n(import \{ defineExtension \} from "agent-fleet";[\s\S]*?)```/.exec(readme)?.[1];
/** TypeScript-only syntax (a type annotation): loaded through tsx, not as plain JavaScript. */
const TYPED_EXTENSION = `import { defineExtension } from "agent-fleet";
const name: string = "typed";
export default defineExtension({ name, afterRun() {} });
`;

describe("a TypeScript module that imports agent-fleet, in a CommonJS project", () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "fleet-tools-import-"));
    await writeFile(join(dir, "package.json"), JSON.stringify({ name: "app", type: "commonjs" }));
    await mkdir(join(dir, "node_modules"));
    // As `npm i agent-fleet` lays it out: the package and its (hoisted) zod.
    await symlink(ROOT, join(dir, "node_modules", "agent-fleet"), "dir");
    await symlink(join(ROOT, "node_modules", "zod"), join(dir, "node_modules", "zod"), "dir");
    expect(TOOLS).toBeDefined();
    expect(EXTENSION).toBeDefined();
    // `.ts`, and `.mts`: what the README offers where tsc refuses a `.ts` module (TS1295).
    for (const ext of ["ts", "mts"]) {
      await writeFile(join(dir, `my-tools.${ext}`), TOOLS!);
      await writeFile(join(dir, `my-extension.${ext}`), EXTENSION!);
    }
    await writeFile(join(dir, "typed-extension.ts"), TYPED_EXTENSION);
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("loads as a --tools module and as an --extensions module, as .ts and as .mts", async () => {
    for (const args of [
      ["--tools", "./my-tools.ts"],
      ["--extensions", "./my-extension.ts"],
      ["--tools", "./my-tools.mts"],
      ["--extensions", "./my-extension.mts"],
      ["--extensions", "./typed-extension.ts"],
    ]) {
      const result = await runFleetCli(["worker", ...args], env, 60_000, dir);
      expect(result.stderr, args[1]).not.toMatch(/could not be loaded|is an ES module/);
      expect(result.stderr, args[1]).toMatch(/^fleet worker: DATABASE_URL: .*does not exist/m);
      expect(result.code, args[1]).toBe(2);
    }
  }, 240_000);
});
