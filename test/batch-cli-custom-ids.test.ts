/**
 * `fleet batch submit` of a file that gives one customId to two lines in different parts
 * (contracts §9: a customId is unique within a batch). The file is read whole before the first
 * part is sent, so the repeat is named then — file, line, and the line it repeats — and nothing
 * is sent, rather than 1,000 sessions created and started, then the batch cancelled when the
 * part holding the repeat is refused.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runFleetCli } from "./support/fleet-cli.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const line = (customId: string) =>
  JSON.stringify({
    customId,
    agent: { model: { provider: "scripted", steps: [{ text: "ok" }] } },
    input: `question ${customId}`,
  });

describe("fleet batch submit: a customId repeated across parts", () => {
  let fleet: FleetEnv;
  let url: string;
  let dir: string;

  beforeAll(async () => {
    fleet = await createFleetEnv("batch-cli-customids");
    url = (await fleet.startApi()).api.url;
    dir = await mkdtemp(join(tmpdir(), "fleet-batch-ids-"));
  }, 60_000);
  afterAll(async () => {
    await fleet?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("names both lines, exit 2, and sends nothing (no session started, no batch to cancel)", async () => {
    const file = join(dir, "dup.jsonl");
    // Line 1,100 (the second part) repeats line 7's customId.
    const lines = Array.from({ length: 1_200 }, (_, i) => line(i === 1_099 ? "l-6" : `l-${i}`));
    await writeFile(file, `${lines.join("\n")}\n`);
    const submitted = await runFleetCli(["batch", "submit", file], { ...fleet.env, FLEET_API_URL: url });
    expect(submitted.code, submitted.stderr).toBe(2);
    expect(submitted.stderr).toMatch(/dup\.jsonl:1100: .*customId "l-6".*line 7/);
    const [stored] = await fleet.database.sql<{ batches: number; sessions: number; runs: number }[]>`
      select (select count(*)::int from batches) as batches, (select count(*)::int from sessions) as sessions,
             (select count(*)::int from runs) as runs`;
    expect(stored).toEqual({ batches: 0, sessions: 0, runs: 0 });
  }, 120_000);
});
