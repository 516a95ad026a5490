/**
 * What a `fleet worker` loads when it starts: the modules its code imports statically, from
 * src/commands/serve.ts's worker role (src/worker/worker.ts) on. The model SDKs are not among
 * them: create-model.ts imports the OpenAI and Anthropic providers at a model's first
 * request. Before, the worker loaded both SDKs at every start (426 of its 807 ES modules,
 * ~0.45 s of its ~1.5 s of CPU to "ready"), and so did every worker a test spawns.
 *
 * The imports are read from the sources: `import … from "x"`, `import "x"` and `export … from
 * "x"` at the start of a line count; `import type` / `export type` (erased) and `import()`
 * (at run time) do not. The same walk finds the SDKs from the providers themselves, so it can
 * see them. (The TypeScript parser would read them more formally, but loading it costs ~2 s.)
 */
import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { ROOT } from "./support/fleet-env.js";

const STATIC_IMPORT = /^(?:import|export)(\s+type\b)?(?:[^;"=(]*?\sfrom)?\s*"([^"]+)";/gm;

/** The packages reached from `entry` through static imports of the sources. */
function staticPackages(entry: string): Set<string> {
  const packages = new Set<string>();
  const seen = new Set<string>();
  const pending = [resolve(ROOT, entry)];
  while (pending.length > 0) {
    const file = pending.pop()!;
    if (seen.has(file)) continue;
    seen.add(file);
    for (const [, typeOnly, name] of readFileSync(file, "utf8").matchAll(STATIC_IMPORT)) {
      if (typeOnly || !name) continue;
      if (name.startsWith(".")) pending.push(join(dirname(file), name.replace(/\.js$/, ".ts")));
      else if (!name.startsWith("node:")) packages.add(/^(@[^/]+\/)?[^/]+/.exec(name)![0]);
    }
  }
  return packages;
}

describe("the modules a worker loads at its start", () => {
  it("include no model SDK; the providers, loaded at a first request, do reach them", () => {
    const worker = staticPackages("src/worker/worker.ts");
    // The walk sees the worker's packages (not BullMQ and ioredis: src/shared/cjs-packages.ts
    // loads them with require(), which the walk does not follow) …
    expect(worker).toContain("pino");
    expect(worker).toContain("prom-client");
    for (const sdk of ["openai", "@anthropic-ai/sdk"]) expect(worker).not.toContain(sdk);
    // … and would see the SDKs, were a provider imported statically.
    expect(staticPackages("src/worker/models/openai.ts")).toContain("openai");
    expect(staticPackages("src/worker/models/anthropic.ts")).toContain("@anthropic-ai/sdk");
  });
});
