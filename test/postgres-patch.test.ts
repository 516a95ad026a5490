/**
 * The postinstall guard (scripts/patch-postgres.mjs) is in the installed postgres.js: without
 * it, a write to a connection that had just closed threw outside any query and crashed the
 * process (test/connection-loss.test.ts shows the behaviour it buys).
 */
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const root = dirname(dirname(dirname(createRequire(import.meta.url).resolve("postgres"))));

describe("postgres.js closed-socket guard", () => {
  it("is applied to both builds of the installed postgres.js, once, and re-running it changes nothing", () => {
    const before = ["src/connection.js", "cjs/src/connection.js"].map((f) =>
      readFileSync(join(root, f), "utf8"),
    );
    for (const text of before) {
      expect(text.match(/agent-fleet: guard against a closed socket/g)).toHaveLength(1);
      expect(text).toMatch(/function nextWrite\(fn\) \{\n {4}if \(!socket\) \{/);
    }
    execFileSync(process.execPath, [resolve(import.meta.dirname, "../scripts/patch-postgres.mjs")]);
    const after = ["src/connection.js", "cjs/src/connection.js"].map((f) =>
      readFileSync(join(root, f), "utf8"),
    );
    expect(after).toEqual(before);
  });
});
