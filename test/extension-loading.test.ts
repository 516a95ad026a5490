/**
 * `fleet worker --extensions FILE` as an operator runs it (contracts §8): a TypeScript
 * extension in a folder of its own (no `"type": "module"` package.json) loads through tsx,
 * and a module that throws while loading names the flag and the file. Before, Node took such
 * a .ts file for CommonJS JavaScript: `fleet: Missing initializer in const declaration`, or
 * Node's own "Cannot require() ES Module … a bug in Node.js" text, and tsx was never asked.
 * The same holds for a `--tools` module. Run from the compiled CLI (as CI and a deployment
 * run it), tsx compiles such a file as CommonJS, whose exports arrive inside `module.exports`.
 * The worker is pointed at a database that does not exist: it loads its extensions first,
 * so reaching that check proves the module loaded.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runFleetCli } from "./support/fleet-cli.js";
import { ROOT } from "./support/fleet-env.js";

const env = {
  DATABASE_URL: "postgres://postgres@127.0.0.1:5432/fleet_extension_loading_missing",
  FLEET_PREFIX: "extension-loading",
};

describe("loading extension modules", () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "fleet-extensions-"));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("a TypeScript extension outside any ES-module package loads, with or without imports", async () => {
    const plain = join(dir, "plain.ts");
    await writeFile(
      plain,
      'const name: string = "typed";\nexport default { name, afterRun(_ctx: unknown) {} };\n',
    );
    const importing = join(dir, "importing.ts");
    await writeFile(
      importing,
      `import { defineExtension } from ${JSON.stringify(join(ROOT, "src/index.js"))};\n` +
        'const name: string = "typed";\nexport default defineExtension({ name });\n',
    );
    for (const file of [plain, importing]) {
      const result = await runFleetCli(["worker", "--extensions", file], env, 60_000);
      expect(result.stderr, file).not.toMatch(/could not be loaded|Missing initializer|require\(\)/);
      expect(result.stderr, file).toMatch(/^fleet worker: DATABASE_URL: .*does not exist/m);
      expect(result.code, file).toBe(2);
    }
  }, 120_000);

  it("a TypeScript --tools module there loads too, by its default export or its `tools`", async () => {
    const tool = (name: string) =>
      `{ name: ${JSON.stringify(name)}, description: "d", parameters: { type: "object" }, async run(): Promise<string> { return "ok"; } }`;
    const byDefault = join(dir, "default-tools.ts");
    await writeFile(byDefault, `export default [${tool("one")}];\n`);
    const byName = join(dir, "named-tools.ts");
    await writeFile(byName, `export const tools = [${tool("two")}];\n`);
    for (const file of [byDefault, byName]) {
      const result = await runFleetCli(["worker", "--tools", file], env, 60_000);
      expect(result.stderr, file).not.toMatch(/could not be loaded|exports no tools|Missing initializer/);
      expect(result.stderr, file).toMatch(/^fleet worker: DATABASE_URL: .*does not exist/m);
      expect(result.code, file).toBe(2);
    }
  }, 120_000);

  it("a hook that is no function, or a hook's name in another case, stops the worker at start", async () => {
    const cases: [string, string][] = [
      [
        'export default { name: "a", onSessionDeleted: "nope" };',
        'extension "a": onSessionDeleted is not a function',
      ],
      ['export default { name: "b", afterrun() {} };', 'extension "b": afterrun is no hook; afterRun?'],
    ];
    for (const [i, [source, said]] of cases.entries()) {
      const file = join(dir, `shape-${i}.mjs`);
      await writeFile(file, `${source}\n`);
      const result = await runFleetCli(["worker", "--extensions", file], env, 60_000);
      expect(result.stderr.trim()).toBe(`fleet worker: --extensions: ${file}: ${said}`);
      expect(result.code).toBe(2);
    }
  }, 60_000);

  it("an export that is a function or a class (a factory) is said to be one, for extensions and tools", async () => {
    // Before: "extension 0 has no name", though the function had one (`audit`), and a factory
    // (`export default () => ({ name, ... })`, a class) is what an author exported by mistake.
    const cases: [string, string, string][] = [
      [
        "--extensions",
        'export default function audit() { return { name: "audit", afterRun() {} }; }',
        "extension 0 is a function (audit), not an extension object: export default defineExtension({ name, ... }) itself, not a function or class that makes one",
      ],
      [
        "--extensions",
        'export default class Audit { name = "audit"; afterRun() {} }',
        "extension 0 is a function (Audit), not an extension object: export default defineExtension({ name, ... }) itself, not a function or class that makes one",
      ],
      [
        "--extensions",
        'export default [async () => ({ name: "audit" })];',
        "extension 0 is a function, not an extension object: export default defineExtension({ name, ... }) itself, not a function or class that makes one",
      ],
      [
        "--tools",
        'export default function sendEmail() { return { name: "send_email" }; }',
        "tool 0 is a function (sendEmail), not a tool object: export default defineTool({ name, description, parameters, run }) itself, not a function or class that makes one",
      ],
    ];
    for (const [i, [flag, source, said]] of cases.entries()) {
      const file = join(dir, `factory-${i}.mjs`);
      await writeFile(file, `${source}\n`);
      const result = await runFleetCli(["worker", flag, file], env, 60_000);
      expect(result.stderr.trim(), source).toBe(`fleet worker: ${flag}: ${file}: ${said}`);
      expect(result.code, source).toBe(2);
    }
  }, 120_000);

  it("a tool's run or a hook that is a generator function stops the worker at start", async () => {
    // Before, the worker started: calling such a function runs none of its body, so the hook
    // never did anything, and the tool's call was answered "{}" (the generator object), success.
    const cases: [string, string, string][] = [
      [
        "--extensions",
        'export default { name: "audit", async *afterRun() { yield 1; } };',
        'extension "audit": afterRun is a generator function, whose body a call does not run; make it a function (async or not)',
      ],
      [
        "--tools",
        'export default { name: "stream", description: "d", parameters: { type: "object" }, async *run() { yield "part"; } };',
        'tool "stream": run is a generator function, whose body a call does not run; make it a function (async or not) that returns the result',
      ],
    ];
    for (const [i, [flag, source, said]] of cases.entries()) {
      const file = join(dir, `generator-${i}.mjs`);
      await writeFile(file, `${source}\n`);
      const result = await runFleetCli(["worker", flag, file], env, 60_000);
      expect(result.stderr.trim(), source).toBe(`fleet worker: ${flag}: ${file}: ${said}`);
      expect(result.code, source).toBe(2);
    }
  }, 120_000);

  it("one extension module given twice stops the worker at start (exit 2), naming the extension", async () => {
    // Before, the worker started and every hook of the module ran twice per run.
    const file = join(dir, "twice.mjs");
    await writeFile(file, 'export default { name: "audit", afterRun() {} };\n');
    const result = await runFleetCli(["worker", "--extensions", file, "--extensions", file], env, 60_000);
    expect(result.stderr.trim()).toBe(
      'fleet worker: --extensions: extension "audit": two extensions have this name',
    );
    expect(result.code).toBe(2);
  }, 60_000);

  it("a --tools export that is no tool stops the worker at start (exit 2), naming what is wrong", async () => {
    // Before, each of these started a worker that said "ready": a tool without `run` was
    // answered "tool.run is not a function" at its first call, and an export keyed by name
    // (or a number) registered a tool named "undefined".
    const tool = 'description: "d", parameters: { type: "object" }, async run() { return "ok"; }';
    const cases: [string, string][] = [
      [
        "export default 5;",
        "tool 0 is not a tool object (defineTool({ name, description, parameters, run }))",
      ],
      [`export default { send_email: { name: "send_email", ${tool} } };`, "tool 0 has no name"],
      ['export default { name: "x" };', 'tool "x": run is not a function'],
      [
        'export default [{ name: "y", parameters: { type: "object" }, async run() { return "ok"; } }];',
        'tool "y": description is not a string',
      ],
      [
        'export default { name: "z", description: "d", parameters: "object", async run() { return "ok"; } };',
        'tool "z": parameters is not an object (a JSON Schema)',
      ],
      [
        // Both providers refuse a tool schema of another type (Anthropic: input_schema.type
        // "Input should be 'object'"; OpenAI: "schema must be a JSON Schema of 'type: \"object\"'").
        'export default { name: "s", description: "d", parameters: { type: "string" }, async run() { return "ok"; } };',
        'tool "s": parameters must be a JSON Schema of type "object", not "string" (model providers refuse any other)',
      ],
    ];
    for (const [i, [source, said]] of cases.entries()) {
      const file = join(dir, `tool-shape-${i}.mjs`);
      await writeFile(file, `${source}\n`);
      const result = await runFleetCli(["worker", "--tools", file], env, 60_000);
      expect(result.stderr.trim(), source).toBe(`fleet worker: --tools: ${file}: ${said}`);
      expect(result.code, source).toBe(2);
    }
  }, 120_000);

  it("a folder given as a module is a usage error naming it (exit 2), for the worker and fleet up", async () => {
    for (const [role, flag] of [
      ["worker", "--tools"],
      ["worker", "--extensions"],
      ["up", "--tools"],
      ["up", "--extensions"],
    ] as const) {
      const result = await runFleetCli([role, flag, dir], env, 60_000);
      expect(result.stderr.trim()).toBe(`fleet ${role}: ${flag}: ${dir}: is a folder, not a module file`);
      expect(result.code).toBe(2);
    }
  }, 120_000);

  it("a module that throws while loading is named, with the flag", async () => {
    const broken = join(dir, "broken.mjs");
    await writeFile(broken, 'throw new Error("no config for the audit sink");\n');
    const result = await runFleetCli(["worker", "--extensions", broken], env, 60_000);
    expect(result.stderr.trim()).toBe(
      `fleet worker: --extensions: ${broken} could not be loaded: no config for the audit sink`,
    );
    expect(result.code).toBe(1);
  }, 60_000);

  it("a module with a syntax error is named with the line that holds it, ES module and CommonJS alike", async () => {
    // Node's SyntaxError of an import() says only "Unexpected token ','": where is in no
    // property of it (an ES module's location is in no part of the error at all).
    const source =
      'export default [\n  { name: "x", description: "d", parameters: { type: "object" } ,,\n];\n';
    const cases = [
      ["syntax.mjs", source],
      ["syntax.cjs", source.replace("export default", "module.exports =")],
    ] as const;
    for (const [name, text] of cases) {
      const file = join(dir, name);
      await writeFile(file, text);
      const result = await runFleetCli(["worker", "--tools", file], env, 60_000);
      expect(result.stderr.trim(), name).toBe(
        `fleet worker: --tools: ${file} could not be loaded: Unexpected token ',' at line 2: ` +
          '{ name: "x", description: "d", parameters: { type: "object" } ,,',
      );
      expect(result.code, name).toBe(1);
    }
  }, 120_000);
});
