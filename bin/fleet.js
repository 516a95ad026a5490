#!/usr/bin/env node
// The `fleet` command. Runs the compiled CLI (`dist/src/cli.js`, made by `npm run build` and
// shipped in the package and the Docker image) when it is there. A checkout with no build —
// `npm ci && npm run demo` on a fresh clone — runs the TypeScript sources through tsx (a dev
// dependency) instead, and so does a checkout whose sources changed after the last build, so
// that a stale dist/ never runs in place of the code being edited.
import { existsSync, readdirSync, statSync } from "node:fs";

const root = new URL("../", import.meta.url);
const compiled = new URL("dist/src/cli.js", root);
const sources = new URL("src/", root);

/** The newest modification time of a file under src/ (0 when there are no sources). */
function newestSource() {
  if (!existsSync(sources)) return 0;
  let newest = 0;
  for (const entry of readdirSync(sources, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile()) continue;
    const mtime = statSync(`${entry.parentPath ?? entry.path}/${entry.name}`).mtimeMs;
    if (mtime > newest) newest = mtime;
  }
  return newest;
}

async function runSources() {
  let register;
  try {
    ({ register } = await import("tsx/esm/api"));
  } catch {
    return false;
  }
  register();
  await import(new URL("src/cli.ts", root).href);
  return true;
}

// npm 11 runs a dependency's install scripts only once approved, so the postgres.js patches of
// the postinstall step (the closed-socket guard, settling without closures) may be missing:
// apply what is, before anything loads postgres.js. Reads only when they are in place.
try {
  const { patchPostgres } = await import(new URL("scripts/patch-postgres.mjs", root).href);
  const problems = patchPostgres(() => {});
  if (problems.length > 0)
    console.error(
      `fleet: warning: postgres.js is not patched (${problems[0]}): a connection lost mid-write can crash this process; run \`node node_modules/agent-fleet/scripts/patch-postgres.mjs\` as the user that installed it`,
    );
} catch {
  // No scripts/ beside this file: nothing to apply.
}

const built = existsSync(compiled) ? statSync(compiled).mtimeMs : 0;
if (built > 0 && newestSource() <= built) {
  await import(compiled.href);
} else if (!(await runSources())) {
  if (built > 0) {
    await import(compiled.href);
  } else {
    console.error(
      "fleet: neither a build (dist/src/cli.js) nor tsx to run the sources: run `npm run build`, or `npm ci` to install the dev dependencies",
    );
    process.exitCode = 1;
  }
}
