/**
 * BullMQ and ioredis reach the code through src/shared/cjs-packages.ts (`require()`), never
 * through a value import (`import { Queue } from "bullmq"`): an import makes Node 20 lex
 * every file those CommonJS packages re-export before it compiles them, ~0.15 s of CPU at
 * each start of a `fleet worker`, `fleet sweeper` or `fleet api` (the figures are in
 * cjs-packages.ts). Before, queues.ts, redis.ts, worker.ts, batch-ends.ts and
 * fair-dispatch.ts imported them, so every role paid it.
 *
 * The imports are read from the sources as test/worker-imports.test.ts reads them: `import …
 * from "x"` and `export … from "x"` at the start of a line; `import type` is erased and costs
 * nothing. A value import in any file under src/ counts: each is loaded by some role.
 */
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
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

describe("BullMQ and ioredis", () => {
  it("are imported for their types only; their values come from cjs-packages.ts's require()", () => {
    const { values, types } = packageImports();
    // The reading sees value imports and type imports, of these packages too …
    expect(values).toContain("worker/worker.ts: pino");
    expect(types).toContain("worker/put-back.ts: bullmq");
    expect(types).toContain("producer/fair-dispatch.ts: ioredis");
    // … and no file imports a value of either.
    const offending = [...values].filter((line) => /: (bullmq|ioredis)$/.test(line));
    expect(offending).toEqual([]);
  });
});
