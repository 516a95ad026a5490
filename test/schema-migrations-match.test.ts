/**
 * The Drizzle tables (drizzle.config.ts's `schema`) and the committed migrations say the same:
 * `drizzle-kit generate` run over a copy of drizzle/ finds nothing to migrate. A column added to a
 * table file without its migration (or a migration edited by hand past its snapshot) fails here,
 * not on an operator's database. The copy sits under the checkout's own tmp/ (gitignored):
 * drizzle-kit reads `--out` relative to the working directory.
 */
import { execFile } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { join, relative } from "node:path";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";
import config from "../drizzle.config.js";

const run = promisify(execFile);
const root = join(import.meta.dirname, "..");

function listing(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: "utf8" }).sort();
}

describe("the schema and the migrations", () => {
  const scratch = join(root, "tmp");
  mkdirSync(scratch, { recursive: true });
  const dir = mkdtempSync(join(scratch, "schema-check-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("drizzle-kit finds nothing to migrate", async () => {
    const out = join(dir, "drizzle");
    cpSync(join(root, "drizzle"), out, { recursive: true });
    const before = listing(out);
    const schema = config.schema;
    expect(typeof schema).toBe("string");
    const { stdout } = await run(
      join(root, "node_modules", ".bin", "drizzle-kit"),
      [
        "generate",
        "--dialect",
        "postgresql",
        "--schema",
        String(schema),
        "--out",
        relative(root, out),
        "--name",
        "schema_check",
      ],
      { cwd: root, timeout: 60_000 },
    );
    // A difference would be a new migration (and snapshot) in the copy.
    expect(listing(out)).toEqual(before);
    expect(stdout).toContain("No schema changes");
  }, 90_000);
});
