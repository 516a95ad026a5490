/**
 * A `--tools` module that fails as it loads or is read says so on one line, naming the file,
 * with no internals: one that throws a string or null (before: "could not be loaded:
 * undefined" and "Cannot read properties of null (reading 'code')"), a tool whose property
 * getter throws (before: the getter's message alone, naming no file), `parameters` that are
 * no JSON (circular, a BigInt: before, the worker started and every run of an agent listing
 * the tool failed as its request was built), a `schema` that is no zod schema (a JSON Schema
 * given there: before, the worker started and every call answered "Invalid arguments:
 * tool.schema.safeParse is not a function" without running), and a module whose top-level
 * await never settles (before: the worker exited 13 and said nothing at all). The worker is
 * pointed at a database that does not exist: it loads its modules first, so none of these
 * reaches that check.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runFleetCli } from "./support/fleet-cli.js";
import { FLEET_BIN, ROOT } from "./support/fleet-env.js";

const env = {
  DATABASE_URL: "postgres://postgres@127.0.0.1:5432/fleet_tools_module_failures_missing",
  FLEET_PREFIX: "tools-module-failures",
};
const tool = (extra: string) =>
  `export default [{ name: "lookup", description: "d", parameters: { type: "object" }, async run() { return "ok"; }, ${extra} }];\n`;

describe("a --tools module that fails as it loads or is read", () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "fleet-tools-failures-"));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it.each([
    ["string.mjs", 'throw "no licence key";\n', 1, " could not be loaded: no licence key"],
    ["null.mjs", "throw null;\n", 1, " could not be loaded: null"],
    ["object.mjs", "throw { code: 7 };\n", 1, ' could not be loaded: {"code":7}'],
    [
      "never.mjs",
      "await new Promise(() => {});\nexport default [];\n",
      1,
      " could not be loaded: its import never finished (a top-level await on something that never settles)",
    ],
  ])("%s: one line naming the file and what it threw", async (name, source, code, said) => {
    const file = join(dir, name);
    await writeFile(file, source);
    const result = await runFleetCli(["worker", "--tools", file], env, 60_000);
    expect(result.stderr).toBe(`fleet worker: --tools: ${file}${said}\n`);
    expect(result.code).toBe(code);
  });

  it.each([
    [
      "getter.mjs",
      `export default [{ get name() { throw new Error("boom in getter"); }, description: "d", parameters: {}, run() {} }];\n`,
      ": tool 0 cannot be read: boom in getter",
    ],
    [
      "circular.mjs",
      `const p = { type: "object", properties: {} }; p.properties.self = p;\n${tool("parameters: p")}`,
      ': tool "lookup": parameters cannot be sent to a model: they are no JSON (Converting circular structure to JSON',
    ],
    [
      "bigint.mjs",
      tool('parameters: { type: "object", maxProperties: 10n }'),
      ': tool "lookup": parameters cannot be sent to a model: they are no JSON (Do not know how to serialize a BigInt)',
    ],
    [
      "schema.mjs",
      tool('schema: { type: "object", properties: {} }'),
      ': tool "lookup": schema has no safeParse: it must be a zod schema (z.object({ ... })) or left out',
    ],
  ])("%s: refused at start with exit 2, naming the file", async (name, source, said) => {
    const file = join(dir, name);
    await writeFile(file, source);
    const result = await runFleetCli(["worker", "--tools", file], env, 60_000);
    expect(result.stderr.startsWith(`fleet worker: --tools: ${file}${said}`)).toBe(true);
    expect(result.stderr.split("\n")).toHaveLength(2);
    expect(result.stderr).not.toMatch(/\n\s+at /);
    expect(result.code).toBe(2);
  });
});

describe("a --tools module whose import waits for ever while the process has other work", () => {
  let dir: string;
  let child: ChildProcess | undefined;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "fleet-tools-waiting-"));
  });
  afterAll(async () => {
    // Also when the test failed waiting: the worker would wait for ever.
    child?.kill("SIGKILL");
    await rm(dir, { recursive: true, force: true });
  });

  it("is said on stderr while the worker waits (before: nothing, for ever)", async () => {
    const file = join(dir, "waits.mjs");
    // An interval keeps the process busy: it never runs out of work, so it never exits.
    await writeFile(file, "await new Promise(() => setInterval(() => {}, 1000));\nexport default [];\n");
    const worker = spawn(process.execPath, [FLEET_BIN, "worker", "--tools", file], {
      cwd: ROOT,
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    child = worker;
    let stderr = "";
    const said = `fleet worker: --tools: ${file}: still loading after 10 s (its import has not finished: a top-level await still waiting?)\n`;
    await new Promise<void>((resolve, reject) => {
      worker.stderr.on("data", (chunk) => {
        stderr += chunk;
        if (stderr.includes(said)) resolve();
      });
      worker.once("exit", (code) => reject(new Error(`exited ${code} before saying it: ${stderr}`)));
    });
    worker.kill("SIGKILL");
    expect(stderr).toBe(said);
  }, 120_000);
});
