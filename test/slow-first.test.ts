/** The test run's file order (test/support/slow-first.ts): the slowest files start first. */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ROOT } from "./support/fleet-env.js";
import { SLOW_FILES, slowFirst } from "./support/slow-first.js";

describe("slowFirst", () => {
  it("puts the named files first, in the list's order, and keeps the others' order", () => {
    const files = [
      "/r/test/a.test.ts",
      "/r/test/slow2.test.ts",
      "/r/test/b.test.ts",
      "/r/test/slow1.test.ts",
    ];
    expect(slowFirst(files, (f) => f, ["test/slow1.test.ts", "test/slow2.test.ts"])).toEqual([
      "/r/test/slow1.test.ts",
      "/r/test/slow2.test.ts",
      "/r/test/a.test.ts",
      "/r/test/b.test.ts",
    ]);
    // A name matches a whole path segment: batch-cli is not the end of a-batch-cli.
    expect(
      slowFirst(["/r/test/a-batch-cli.test.ts", "/r/test/batch-cli.test.ts"], (f) => f, [
        "test/batch-cli.test.ts",
      ]),
    ).toEqual(["/r/test/batch-cli.test.ts", "/r/test/a-batch-cli.test.ts"]);
  });

  it("names only files that exist, each once", () => {
    for (const file of SLOW_FILES) expect(existsSync(join(ROOT, file)), file).toBe(true);
    expect(new Set(SLOW_FILES).size).toBe(SLOW_FILES.length);
  });
});
