/**
 * `--idempotency-key` of `fleet batch submit`, `fleet session import` and `fleet webhook-secret
 * --rotate`, given what no Idempotency-Key can be. A character fetch cannot put in a header (a
 * line break inside it, one past Latin-1 such as `€`) ended the command with fetch's own words
 * (`Headers.append: "a\r\nb" is an invalid header value.`, `Cannot convert argument to a
 * ByteString …`), exit 1, as if the fleet had failed; and a batch's prefix long enough that a
 * later part's key (`PREFIX-10`) passed the API's 255 characters had its first parts sent, then
 * the part refused and the batch cancelled, and running it again (as the error said) did the same.
 * Now each is a usage error naming the flag, exit 2, and nothing is sent.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { runFleetCli } from "./support/fleet-cli.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const line = (i: number) =>
  JSON.stringify({
    agent: { model: { provider: "scripted", steps: [{ text: `a ${i}` }] } },
    input: `q ${i}`,
  });

describe("--idempotency-key values no Idempotency-Key can be", () => {
  let fleet: FleetEnv;
  let env: Record<string, string>;
  let dir: string;
  let batchFile: string;
  let exportFile: string;

  beforeAll(async () => {
    fleet = await createFleetEnv("cli-idempotency-keys");
    const key = (await new ApiKeys(fleet.database).create("acme")).key;
    env = { ...fleet.env, FLEET_API_URL: (await fleet.startApi()).api.url, FLEET_API_KEY: key };
    dir = await mkdtemp(join(tmpdir(), "cli-idempotency-keys-"));
    batchFile = join(dir, "batch.jsonl");
    await writeFile(batchFile, `${Array.from({ length: 11 }, (_, i) => line(i)).join("\n")}\n`);
    exportFile = join(dir, "export.jsonl");
    const header = {
      fleetSessionExport: 1,
      id: "s",
      agent: { model: { provider: "scripted", steps: [{ text: "ok" }] } },
      metadata: {},
      createdAt: "2026-01-01T00:00:00.000Z",
      exportedAt: "2026-01-01T00:00:00.000Z",
    };
    await writeFile(
      exportFile,
      [
        JSON.stringify(header),
        JSON.stringify({ role: "user", content: "hi", seq: 1, createdAt: "2026-01-01T00:00:00.000Z" }),
        JSON.stringify({ fleetSessionExportEnd: { messages: 1 } }),
        "",
      ].join("\n"),
    );
  }, 60_000);
  afterAll(async () => {
    await fleet?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const stored = async () => {
    const [row] = await fleet.database.sql<{ sessions: number; batches: number; keys: number }[]>`
      select (select count(*)::int from sessions) as sessions, (select count(*)::int from batches) as batches,
             (select count(*)::int from idempotency_keys) as keys`;
    return row;
  };

  it("a line break or a character past Latin-1 is a usage error naming the flag, exit 2, nothing sent", async () => {
    const before = await stored();
    for (const bad of ["a\r\nb", "deploy-€", "a b"]) {
      for (const args of [
        ["batch", "submit", "--idempotency-key", bad, batchFile],
        ["session", "import", "--idempotency-key", bad, exportFile],
        ["webhook-secret", "--rotate", "--idempotency-key", bad],
      ]) {
        const run = await runFleetCli(args, env);
        const what = `${args.slice(0, 2).join(" ")} ${JSON.stringify(bad)}`;
        expect([run.code, run.stdout], `${what}: ${run.stderr}`).toEqual([2, ""]);
        expect(run.stderr, what).toMatch(/option '--idempotency-key <(PREFIX|KEY)>' argument .* is invalid/);
        expect(run.stderr, what).toContain("visible ASCII");
        expect(run.stderr, what).not.toMatch(/Headers\.append|ByteString/);
      }
    }
    expect(await stored()).toEqual(before);
  }, 120_000);

  it("a batch's prefix too long for its last part's key is refused before any part is sent", async () => {
    const before = await stored();
    // 11 parts of one session: keys PREFIX-0 … PREFIX-10; with 253 characters, PREFIX-10 is 256.
    const prefix = "p".repeat(253);
    const run = await runFleetCli(
      ["batch", "submit", "--part-size", "1", "--idempotency-key", prefix, batchFile],
      env,
    );
    expect([run.code, run.stdout], run.stderr).toEqual([2, ""]);
    expect(run.stderr).toContain("--idempotency-key");
    expect(run.stderr).toContain("at most 252 characters");
    expect(await stored()).toEqual(before);
    // Surrounding blanks (a key read from a file with CRLF) are dropped, as fetch drops them.
    const ok = await runFleetCli(
      ["batch", "submit", "--part-size", "1", "--idempotency-key", `${"p".repeat(252)}\r`, batchFile],
      env,
    );
    expect(ok.code, ok.stderr).toBe(0);
  }, 120_000);
});
