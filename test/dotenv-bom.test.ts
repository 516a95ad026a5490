/**
 * A `.env` saved with a UTF-8 byte order mark (Notepad's "UTF-8 with BOM", Windows
 * PowerShell's `Out-File -Encoding utf8`), usually with CRLF line ends too. Node's
 * `process.loadEnvFile` keeps the mark as part of the first variable's name, so the first line
 * (`\uFEFFDATABASE_URL=…`) set a variable no one reads, in silence, and the command went to the
 * default `postgres://postgres@127.0.0.1:5432/agent_fleet` instead — `fleet migrate` creates
 * that database and migrates it. The mark is skipped now, as RFC 8259 lets a JSON reader do
 * and as the CLI's other files (histories, batch files) skip it.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runFleetCli } from "./support/fleet-cli.js";

describe("a .env that starts with a byte order mark", () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "fleet-dotenv-bom-"));
  });
  afterAll(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("sets its first variable as written (CRLF line ends too)", async () => {
    // Nothing listens on port 1: the command names the URL it was given, or the default's.
    await writeFile(
      join(dir, ".env"),
      Buffer.concat([
        Buffer.from([0xef, 0xbb, 0xbf]),
        Buffer.from("DATABASE_URL=postgres://postgres@127.0.0.1:1/from_dotenv\r\nFLEET_PREFIX=bom-test\r\n"),
      ]),
    );
    const run = await runFleetCli(
      ["keys", "list"],
      { DATABASE_URL: undefined, FLEET_PREFIX: undefined },
      60_000,
      dir,
    );
    expect(run.code, run.stderr).toBe(2);
    expect(run.stderr).toContain(
      "DATABASE_URL: cannot reach Postgres at postgres://postgres@127.0.0.1:1/from_dotenv",
    );
  }, 90_000);

  it("a variable already set still wins over the file's", async () => {
    await writeFile(
      join(dir, ".env"),
      Buffer.concat([
        Buffer.from([0xef, 0xbb, 0xbf]),
        Buffer.from("DATABASE_URL=postgres://postgres@127.0.0.1:1/from_dotenv\n"),
      ]),
    );
    const run = await runFleetCli(
      ["keys", "list"],
      { DATABASE_URL: "postgres://postgres@127.0.0.1:1/from_environment" },
      60_000,
      dir,
    );
    expect(run.code, run.stderr).toBe(2);
    expect(run.stderr).toContain("postgres://postgres@127.0.0.1:1/from_environment");
  }, 90_000);

  it("a .env in UTF-16 (Windows PowerShell's `echo A=1 > .env`) is refused saying so, not read as nothing", async () => {
    await writeFile(
      join(dir, ".env"),
      Buffer.concat([
        Buffer.from([0xff, 0xfe]),
        Buffer.from("DATABASE_URL=postgres://postgres@127.0.0.1:1/from_dotenv\r\n", "utf16le"),
      ]),
    );
    const run = await runFleetCli(["keys", "list"], { DATABASE_URL: undefined }, 60_000, dir);
    expect(run.code, run.stderr).toBe(2);
    expect(run.stderr.trim()).toBe("fleet keys list: .env: is UTF-16; save it as UTF-8");
  }, 90_000);
});
