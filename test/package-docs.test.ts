/**
 * The package holds every document its README and its `--help` texts point to. The README
 * ships in the tarball (npm shows it on the package's page) and links `docs/…` by relative
 * paths; `fleet api --help` and others cite the contracts by section. A document left out of
 * `files` is a broken link and an image that does not load for everyone with the installed
 * package, who has no checkout to look in.
 *
 * `npm pack --dry-run` lists what the tarball would hold without building it (the files
 * under dist/ are test/package.test.ts's concern).
 */
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import type { Command } from "commander";
import { beforeAll, describe, expect, it } from "vitest";
import { buildProgram } from "../src/commands/program.js";

const ROOT = resolve(import.meta.dirname, "..");

/** The relative targets of the README's links and images (`](docs/x.md#part)` → `docs/x.md`). */
function relativeLinks(markdown: string): string[] {
  const targets = [...markdown.matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1]!);
  const relative = targets.filter((t) => !/^([a-z][a-z0-9+.-]*:|#)/i.test(t));
  return [...new Set(relative.map((t) => t.replace(/#.*$/, "")))].sort();
}

/** Every `--help` text of the `fleet` program, its words joined by single spaces. */
function helpTexts(): Map<string, string> {
  const texts = new Map<string, string>();
  const walk = (command: Command, path: string) => {
    texts.set(path, command.helpInformation().replace(/\s+/g, " "));
    for (const sub of command.commands) walk(sub, `${path} ${sub.name()}`);
  };
  walk(buildProgram().program, "fleet");
  return texts;
}

describe("the documents the package points to", () => {
  let packed: string[];

  beforeAll(async () => {
    // Without what an outer `npm run` sets (npm_config_*), which a nested npm would obey.
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k)));
    const { stdout } = await promisify(execFile)("npm", ["pack", "--dry-run", "--json", "--ignore-scripts"], {
      cwd: ROOT,
      env,
      maxBuffer: 16 * 1024 * 1024,
    });
    packed = (JSON.parse(stdout) as { files: { path: string }[] }[])[0]!.files.map((f) => f.path);
  }, 60_000);

  it("finds the README's relative links (the check has something to check)", () => {
    expect(relativeLinks("[a](docs/a.md#x) ![b](docs/b.png) [c](https://x.org/y) [d](#part)")).toEqual([
      "docs/a.md",
      "docs/b.png",
    ]);
    expect(relativeLinks(readFileSync(join(ROOT, "README.md"), "utf8")).length).toBeGreaterThan(0);
  });

  it("ships the README and every file it links or shows by a relative path", () => {
    expect(packed).toContain("README.md");
    const links = relativeLinks(readFileSync(join(ROOT, "README.md"), "utf8"));
    expect(links.filter((link) => !packed.includes(link))).toEqual([]);
  });

  it("ships the license text its package.json names", () => {
    // package.json says MIT; MIT asks for its text to travel with every copy.
    const manifest = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { license: string };
    expect(manifest.license).toBe("MIT");
    expect(packed).toContain("LICENSE");
    expect(readFileSync(join(ROOT, "LICENSE"), "utf8")).toMatch(/^MIT License\n/);
  });

  it("holds no docker-compose.yml nor Dockerfile, as the README's Docker section tells its readers", () => {
    // The image builds from the sources, which the package does not hold; deploy/ it does.
    const readme = readFileSync(join(ROOT, "README.md"), "utf8").replace(/\s+/g, " ");
    expect(readme).toContain("the npm package ships neither `docker-compose.yml` nor the `Dockerfile`");
    expect(packed.filter((file) => /^(docker-compose\.ya?ml|Dockerfile)$/.test(file))).toEqual([]);
    expect(packed).toContain("deploy/prometheus/prometheus.yml");
  });

  it("`--help` cites the contracts by a file the package ships", () => {
    const cited: string[] = [];
    for (const [command, text] of helpTexts()) {
      // "contracts §10" alone names no file: the reader of an installed package cannot find it.
      expect(text, command).not.toMatch(/(?<!docs\/)contracts(\.md)? §/);
      for (const [, file] of text.matchAll(/\b(docs\/[\w.-]+)/g)) cited.push(file!);
    }
    expect(cited.length).toBeGreaterThan(0);
    expect([...new Set(cited)].filter((file) => !packed.includes(file))).toEqual([]);
  });
});

describe("the functions the README has a program call", () => {
  it("are exported by the package's root, or said to be a checkout's", async () => {
    const readme = readFileSync(join(ROOT, "README.md"), "utf8");
    const root = await import("../src/index.js");
    // Before: "a sweeper started in a process of your own (`startSweeper().stop()`)", which
    // the package does not export: only a checkout's src/ has it.
    for (const match of readme.matchAll(/`(start[A-Z][A-Za-z]*)\(/g)) {
      const name = match[1]!;
      const around = readme.slice(match.index!, match.index! + 200);
      if (name in root) continue;
      expect(around, `${name}: not exported by "agent-fleet"`).toMatch(/in a checkout/);
    }
  });
});
