/**
 * The README's requirements line says what package.json and the lockfile say: the Node.js
 * version of `engines`, the one vite (a dev dependency: build, tests) needs, and every
 * dependency a user's `npm install` warns about (EBADENGINE) on that Node version.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ROOT } from "./support/fleet-env.js";

const readme = readFileSync(join(ROOT, "README.md"), "utf8");
const pkg = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { engines: { node: string } };
type Locked = { engines?: { node?: string }; dev?: boolean; optional?: boolean };
const lock = JSON.parse(readFileSync(join(ROOT, "package-lock.json"), "utf8")) as {
  packages: Record<string, Locked>;
};

/** Lowest major.minor that `range` (">=X.Y", "^X.Y.Z || …", "20 || >=22") admits in major 20, or null. */
function lowestTwenty(range: string): [number, number] | null {
  const admitted = range
    .split("||")
    .map((part) => /^\s*(>=|\^)?\s*(\d+)(?:\.(\d+))?/.exec(part))
    .filter((m): m is RegExpExecArray => m !== null)
    .map((m) => ({ op: m[1] ?? "", major: Number(m[2]), minor: Number(m[3] ?? 0) }))
    .filter((p) => p.major === 20 || (p.op === ">=" && p.major < 20))
    .map((p): [number, number] => (p.major === 20 ? [20, p.minor] : [20, 0]));
  admitted.sort((a, b) => a[1] - b[1]);
  return admitted[0] ?? null;
}

describe("README requirements", () => {
  const minimum = /^>=(\d+)\.(\d+)$/.exec(pkg.engines.node);

  it("names the Node.js version of package.json's engines, and the one a checkout's vite needs", () => {
    expect(minimum, pkg.engines.node).not.toBeNull();
    expect(readme).toContain(`Needs Node.js ${minimum![1]}.${minimum![2]} or newer`);
    const vite = lowestTwenty(lock.packages["node_modules/vite"]!.engines!.node!);
    expect(vite).not.toBeNull();
    expect(readme).toContain(`(a checkout's build and tests: ${vite!.join(".")} or newer, for vite)`);
  });

  it("names every installed dependency that npm warns about on that version (EBADENGINE)", () => {
    const minor = Number(minimum![2]);
    const warned = Object.entries(lock.packages)
      .filter(([path, p]) => path !== "" && !p.dev && !p.optional && p.engines?.node)
      .filter(([, p]) => {
        const lowest = lowestTwenty(p.engines!.node!);
        return lowest === null || lowest[1] > minor;
      })
      .map(([path]) => path.replace(/^.*node_modules\//, ""))
      .sort();
    console.log(`EBADENGINE on Node ${pkg.engines.node}: ${warned.join(", ")}`);
    expect(warned.length).toBeGreaterThan(0);
    const line = /On Node 20, npm\s+warns `EBADENGINE` for ([^(]*)\(/.exec(readme);
    expect(line, "the README's EBADENGINE sentence").not.toBeNull();
    const named = [...line![1]!.matchAll(/`([^`]+)`/g)].map((m) => m[1]).sort();
    expect(named).toEqual(warned);
  });

  it("reads version ranges as npm does for major 20", () => {
    expect(lowestTwenty(">=22")).toBeNull();
    expect(lowestTwenty("20 || >=22")).toEqual([20, 0]);
    expect(lowestTwenty("^20.19.0 || >=22.12.0")).toEqual([20, 19]);
    expect(lowestTwenty("^16 || ^18 || >=20")).toEqual([20, 0]);
    expect(lowestTwenty(">=18")).toEqual([20, 0]);
  });
});
