/**
 * The source tree shows the roles (issue "Roles as rooms"): producer, worker and sweeper
 * never import one another, src/shared imports no role, and no module imports itself
 * through a circle (type-only imports included: a circle of types is still a circle).
 * src/commands, src/cli.ts and src/index.ts compose the roles and may import any of them.
 */
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const root = resolve(import.meta.dirname, "..");
const src = join(root, "src");

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return sourceFiles(path);
    return name.endsWith(".ts") ? [path] : [];
  });
}

/** Relative imports and re-exports of one file, resolved to repository paths. */
function localImports(file: string): string[] {
  const text = readFileSync(file, "utf8");
  const targets: string[] = [];
  for (const match of text.matchAll(/(?:^|\n)\s*(?:import|export)\b[^;]*?from\s+"(\.[^"]+)"/g)) {
    const spec = match[1]!.replace(/\.js$/, ".ts");
    targets.push(relative(root, resolve(dirname(file), spec)));
  }
  return targets;
}

const graph = new Map(sourceFiles(src).map((file) => [relative(root, file), localImports(file)]));
const ROLES = ["producer", "worker", "sweeper"] as const;
const roleOf = (path: string): string | undefined => /^src\/([^/]+)\//.exec(path)?.[1];

describe("source tree", () => {
  it("resolves every relative import to a file that exists", () => {
    const missing = [...graph].flatMap(([file, targets]) =>
      targets.filter((t) => !graph.has(t)).map((t) => `${file} → ${t}`),
    );
    expect(missing).toEqual([]);
  });

  it("has a folder for each role and shared code", () => {
    for (const role of [...ROLES, "shared"]) expect(statSync(join(src, role)).isDirectory()).toBe(true);
  });

  it("no role imports another role, and shared imports no role", () => {
    const crossings: string[] = [];
    for (const [file, targets] of graph) {
      const from = roleOf(file);
      if (from !== "shared" && !ROLES.includes(from as (typeof ROLES)[number])) continue;
      for (const target of targets) {
        const to = roleOf(target);
        if (to === from || to === "shared") continue;
        crossings.push(`${file} → ${target}`);
      }
    }
    expect(crossings).toEqual([]);
  });

  it("has no import circles", () => {
    const state = new Map<string, "open" | "done">();
    const circles: string[] = [];
    const visit = (file: string, path: string[]): void => {
      if (state.get(file) === "done") return;
      if (state.get(file) === "open") {
        circles.push([...path.slice(path.indexOf(file)), file].join(" → "));
        return;
      }
      state.set(file, "open");
      for (const target of graph.get(file) ?? []) visit(target, [...path, file]);
      state.set(file, "done");
    };
    for (const file of graph.keys()) visit(file, []);
    expect(circles).toEqual([]);
  });

  it("each role folder says what it does in a README", () => {
    for (const role of [...ROLES, "shared"]) {
      const text = readFileSync(join(src, role, "README.md"), "utf8");
      expect(text).toMatch(/Entry point|entry point/);
    }
  });
});
