/**
 * BullMQ and ioredis reach the code through src/shared/cjs-packages.ts (`require()`), and
 * Fastify, its plugins and bull-board through src/producer/api-packages.ts, never through a
 * value import (`import { Queue } from "bullmq"`): an import makes Node 20 lex every file
 * those CommonJS packages re-export before it compiles them, ~0.15 s of CPU at each start of
 * a `fleet worker`, `fleet sweeper` or `fleet api`, ~0.1 s more for the API's packages (the
 * figures are in those two files). Before, queues.ts, redis.ts, worker.ts, batch-ends.ts and
 * fair-dispatch.ts imported BullMQ or ioredis, so every role paid it; http-api.ts,
 * openapi.ts, console-route.ts and admin-board.ts the API's.
 *
 * The imports are read from the sources as test/worker-imports.test.ts reads them: `import …
 * from "x"` and `export … from "x"` at the start of a line; `import type` is erased and costs
 * nothing. A value import in any file under src/ counts: each is loaded by some role.
 */
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";
import { ROOT } from "./support/fleet-env.js";

const STATIC_IMPORT = /^(?:import|export)(\s+type\b)?(?:[^;"=(]*?\sfrom)?\s*"([^"]+)";/gm;

/** Each `file: package` a source under src/ imports, split into value and type-only imports. */
function packageImports(): { values: Set<string>; types: Set<string> } {
  const values = new Set<string>();
  const types = new Set<string>();
  const src = join(ROOT, "src");
  for (const entry of readdirSync(src, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile() || !entry.name.endsWith(".ts")) continue;
    const file = join(entry.parentPath, entry.name);
    const name = file.slice(src.length + 1);
    for (const [, typeOnly, spec] of readFileSync(file, "utf8").matchAll(STATIC_IMPORT)) {
      if (!spec || spec.startsWith(".") || spec.startsWith("node:")) continue;
      const pkg = /^(@[^/]+\/)?[^/]+/.exec(spec)![0];
      (typeOnly ? types : values).add(`${name}: ${pkg}`);
    }
  }
  return { values, types };
}

/** The CommonJS packages whose values are required, never imported. */
const REQUIRED =
  /: (bullmq|ioredis|fastify|@fastify\/swagger|@fastify\/static|@bull-board\/api|@bull-board\/fastify)$/;

describe("BullMQ, ioredis, Fastify and bull-board", () => {
  it("are imported for their types only; their values come from require() (cjs-packages.ts, api-packages.ts)", () => {
    const { values, types } = packageImports();
    // The reading sees value imports and type imports, of these packages too …
    expect(values).toContain("worker/worker.ts: pino");
    expect(types).toContain("worker/put-back.ts: bullmq");
    expect(types).toContain("producer/fair-dispatch.ts: ioredis");
    expect(types).toContain("producer/api-deps.ts: fastify");
    // … and no file imports a value of one of them.
    const offending = [...values].filter((line) => REQUIRED.test(line));
    expect(offending).toEqual([]);
  });
});

describe("BullMQ's values in cjs-packages.ts", () => {
  it("are those its index exports, read without loading the index", async () => {
    const { bullmq } = await import("../src/shared/cjs-packages.js");
    const index = createRequire(import.meta.url)("bullmq") as Record<string, unknown>;
    for (const [name, value] of Object.entries(bullmq)) expect(value, name).toBe(index[name]);
    // A process that loads only cjs-packages.ts (through tsx, as bin/fleet.js runs the sources)
    // loads no file of BullMQ until a value is used (a role refused at its start checks, which
    // use ioredis from here, loads no BullMQ: role-imports.test.ts); then its queue and worker,
    // never its index.
    const source = pathToFileURL(join(ROOT, "src/shared/cjs-packages.ts")).href;
    const loaded = execFileSync(
      process.execPath,
      [
        "--import",
        "tsx/esm",
        "--input-type=module",
        "-e",
        `const m = await import(${JSON.stringify(source)}); const { createRequire } = await import("node:module"); const cache = () => Object.keys(createRequire(${JSON.stringify(source)}).cache); const before = cache(); void m.bullmq.Worker; console.log(JSON.stringify({ before, after: cache() }));`,
      ],
      { cwd: ROOT, encoding: "utf8" },
    );
    const { before, after } = JSON.parse(loaded) as { before: string[]; after: string[] };
    const names = (list: string[]) => list.map((file) => file.replace(/.*node_modules\//, ""));
    expect(names(before).filter((file) => file.startsWith("bullmq/"))).toEqual([]);
    expect(names(after)).toContain("bullmq/dist/cjs/classes/worker.js");
    expect(names(after)).not.toContain("bullmq/dist/cjs/index.js");
  });
});
