/**
 * What test/package.test.ts needs to pack this checkout as a user's `npm pack` would: a copy
 * of what the package is built from (so the build stays out of this working tree), whether
 * this checkout's dist/ may be packed as it is, and a child-process runner whose environment
 * carries nothing an outer `npm run` set.
 */
import { execFile } from "node:child_process";
import { cp, mkdir, readdir, stat, symlink } from "node:fs/promises";
import { join } from "node:path";
import { ROOT } from "./fleet-env.js";

/** What the package is built from: the `files` of package.json plus the build's inputs. */
const CHECKOUT = [
  "package.json",
  "package-lock.json",
  "tsconfig.json",
  "tsconfig.build.json",
  "tsconfig.cjs.json",
  "README.md",
  "esm-only.cjs",
  "bin",
  "console",
  "deploy",
  "docs",
  "drizzle",
  "scripts",
  "src",
];

/** What `npm run build` reads (the sources, the console, its configs, the compilers' versions). */
const BUILD_INPUTS = [
  "package.json",
  "package-lock.json",
  "tsconfig.json",
  "tsconfig.build.json",
  "tsconfig.cjs.json",
  "console",
  "src",
];
/** What a complete `npm run build` leaves in dist/ (it empties dist/ first). */
const BUILD_OUTPUTS = [
  "dist/src/cli.js",
  "dist/src/index.d.ts",
  "dist/cjs/package.json",
  "dist/console/index.html",
];

/** The modification times of the files at `path` (a file, or a directory's files, recursively). */
async function mtimes(path: string): Promise<number[]> {
  const info = await stat(path);
  if (!info.isDirectory()) return [info.mtimeMs];
  const entries = await readdir(path, { recursive: true, withFileTypes: true });
  return Promise.all(
    entries.filter((e) => e.isFile()).map(async (e) => (await stat(join(e.parentPath, e.name))).mtimeMs),
  );
}

/**
 * Whether `root`'s dist/ is a complete build made after the last change to any build input:
 * its oldest file newer than the newest input (the rule bin/fleet.js runs dist/ by).
 */
async function freshBuild(root: string): Promise<boolean> {
  for (const output of BUILD_OUTPUTS) if (!(await stat(join(root, output)).catch(() => null))) return false;
  const built = Math.min(...(await mtimes(join(root, "dist"))));
  const inputs = (await Promise.all(BUILD_INPUTS.map((input) => mtimes(join(root, input))))).flat();
  return Math.max(...inputs) < built;
}

export type Run = { code: number | null; stdout: string; stderr: string };

/** The environment without what an outer `npm run` sets (npm_config_*, …), which nested npm would obey. */
function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k)));
  delete env.FLEET_DEBUG;
  return { ...env, ...extra };
}

export function run(
  command: string,
  args: string[],
  cwd: string,
  env: Record<string, string> = {},
  timeoutMs = 60_000,
): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      command,
      args,
      { cwd, env: cleanEnv(env), timeout: timeoutMs, maxBuffer: 16 * 1024 * 1024 },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === "number" ? error.code : null) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

/**
 * Copies what the package is built from into `dir`/checkout, node_modules linked; with this
 * checkout's dist/ too when it is a fresh build (`reuse`: pack it with --ignore-scripts).
 */
export async function copyCheckout(dir: string): Promise<{ checkout: string; reuse: boolean }> {
  const checkout = join(dir, "checkout");
  await mkdir(checkout);
  for (const entry of CHECKOUT) await cp(join(ROOT, entry), join(checkout, entry), { recursive: true });
  await symlink(join(ROOT, "node_modules"), join(checkout, "node_modules"), "dir");
  const reuse = await freshBuild(ROOT);
  if (reuse) await cp(join(ROOT, "dist"), join(checkout, "dist"), { recursive: true });
  return { checkout, reuse };
}
