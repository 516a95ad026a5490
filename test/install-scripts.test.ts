/**
 * npm 11 runs no dependency's install script unless package.json's `allowScripts` approves
 * it, and ends every `npm ci` with a warning listing the ones it skipped. Ours are decided:
 * every dependency with an install script has an entry, and the ones denied lose nothing —
 * their prebuilt binaries come as optional packages, which this checks by using them.
 */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = resolve(import.meta.dirname, "..");
const json = (path: string) => JSON.parse(readFileSync(join(ROOT, path), "utf8"));
const require = createRequire(join(ROOT, "package.json"));

describe("dependencies' install scripts", () => {
  it("every dependency with an install script has an allowScripts decision", () => {
    const lock = json("package-lock.json") as {
      packages: Record<string, { hasInstallScript?: boolean }>;
    };
    const decided = (json("package.json") as { allowScripts?: Record<string, boolean> }).allowScripts ?? {};
    const withScripts = Object.entries(lock.packages)
      .filter(([path, info]) => path !== "" && info.hasInstallScript)
      .map(([path]) => path.slice(path.lastIndexOf("node_modules/") + "node_modules/".length));
    expect(withScripts.length).toBeGreaterThan(0);
    expect([...new Set(withScripts)].filter((name) => !(name in decided))).toEqual([]);
  });

  it("every copy of esbuild works without its postinstall (the binary comes from @esbuild/<platform>)", async () => {
    const lock = json("package-lock.json") as { packages: Record<string, unknown> };
    const copies = Object.keys(lock.packages).filter((path) => path.endsWith("node_modules/esbuild"));
    expect(copies.length).toBeGreaterThan(0);
    for (const copy of copies) {
      const esbuild = require(join(ROOT, copy)) as typeof import("esbuild");
      const { code } = await esbuild.transform("const a: number = 1;", { loader: "ts" });
      expect(code.trim(), copy).toBe("const a = 1;");
    }
  });

  it("msgpackr's native extractor loads without its install step (a prebuilt package)", () => {
    const bullmq = createRequire(require.resolve("bullmq"));
    const extract = createRequire(bullmq.resolve("msgpackr"))("msgpackr-extract") as {
      extractStrings?: unknown;
    };
    expect(typeof extract.extractStrings).toBe("function");
  });
});
