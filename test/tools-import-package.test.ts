/**
 * The README's `--tools` and `--extensions` examples as a new user writes them: TypeScript that
 * imports `defineTool` / `defineExtension` from "agent-fleet", in a project `npm init -y` made
 * (`"type": "commonjs"`). tsx compiles such a file as CommonJS, so its import becomes
 * `require("agent-fleet")`, which the package answers with esm-only.cjs's error: before, the
 * worker stopped with `fleet: --tools: my-tools.ts could not be loaded: agent-fleet is an ES
 * module …` (exit 1). The worker is pointed at a database that does not exist: it loads its
 * modules first, so reaching that check proves they loaded.
 */
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

const TOOLS = `import { z } from "zod";
import { defineTool } from "agent-fleet";

export default [
  defineTool({
    name: "send_email",
    description: "Send an email.",
    parameters: { type: "object", properties: { to: { type: "string" }, body: { type: "string" } }, required: ["to", "body"] },
    schema: z.object({ to: z.string().email(), body: z.string() }),
    timeoutMs: 30_000,
    async run({ to, body }, { callId, sessionId, signal }) {
      return \`sent to \${to}\`;
    },
  }),
];
`;

const EXTENSION = `import { defineExtension } from "agent-fleet";
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
    await writeFile(join(dir, "my-tools.ts"), TOOLS);
    await writeFile(join(dir, "my-extension.ts"), EXTENSION);
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("loads as a --tools module and as an --extensions module", async () => {
    for (const args of [
      ["--tools", "./my-tools.ts"],
      ["--extensions", "./my-extension.ts"],
    ]) {
      const result = await runFleetCli(["worker", ...args], env, 60_000, dir);
      expect(result.stderr, args[1]).not.toMatch(/could not be loaded|is an ES module/);
      expect(result.stderr, args[1]).toMatch(/^fleet: DATABASE_URL: .*does not exist/m);
      expect(result.code, args[1]).toBe(2);
    }
  }, 120_000);
});
