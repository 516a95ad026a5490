/**
 * `fleet batch …` as a user runs it (contracts §9): a JSONL file of 1,200 sessions is
 * submitted in two parts (one batch: created open, closed by the last part), followed with
 * --wait (plain progress lines off a terminal), its results streamed as NDJSON; a bad line
 * is named by file and line; status and cancel print the batch JSON.
 */
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runFleetCli } from "./support/fleet-cli.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const line = (i: number) =>
  JSON.stringify({
    customId: `l-${i}`,
    agent: { model: { provider: "scripted", steps: [{ text: `answer ${i}` }] } },
    input: `question ${i}`,
  });

describe("fleet batch", () => {
  let fleet: FleetEnv;
  let url: string;

  beforeAll(async () => {
    fleet = await createFleetEnv("batch-cli");
    url = (await fleet.startApi()).api.url;
    await fleet.spawnWorker({ WORKER_CONCURRENCY: "16" });
  }, 60_000);
  afterAll(() => fleet?.close());

  const fleetCli = (args: string[]) => runFleetCli(args, { ...fleet.env, FLEET_API_URL: url });

  it("submits a file in parts as one batch, waits for it, and streams its results", async () => {
    const file = join(fleet.config.toolDir, "in.jsonl");
    await writeFile(file, `${Array.from({ length: 1_200 }, (_, i) => line(i)).join("\n")}\n`);
    const submitted = await fleetCli(["batch", "submit", file, "--wait"]);
    expect(submitted.code, submitted.stderr).toBe(0);
    expect(submitted.stderr).toContain("submitted 1000/1200");
    expect(submitted.stderr).toContain("submitted 1200/1200");
    expect(submitted.stderr).toMatch(/ended 1200\/1200/);
    const batch = JSON.parse(submitted.stdout);
    expect(batch).toMatchObject({ status: "ended", open: false, counts: { total: 1_200, completed: 1_200 } });

    const results = await fleetCli(["batch", "results", batch.id]);
    expect(results.code, results.stderr).toBe(0);
    const lines = results.stdout
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(lines).toHaveLength(1_200);
    const byId = new Map(lines.map((l) => [l.customId, l.output]));
    expect(byId.get("l-0")).toBe("answer 0");
    expect(byId.get("l-1199")).toBe("answer 1199");

    const status = await fleetCli(["batch", "status", batch.id]);
    expect(JSON.parse(status.stdout).counts.total).toBe(1_200);
    const cancelled = await fleetCli(["batch", "cancel", batch.id]);
    expect(cancelled.code).toBe(0);
    // Nothing was left to cancel: it stays ended, every session completed.
    expect(JSON.parse(cancelled.stdout).counts.completed).toBe(1_200);
  }, 90_000);

  it("names the file's line of a bad session, and a missing batch exits 2", async () => {
    const file = join(fleet.config.toolDir, "bad.jsonl");
    await writeFile(
      file,
      [line(1), "", line(2), JSON.stringify({ agent: { model: { provider: "nope" } } })].join("\n"),
    );
    const bad = await fleetCli(["batch", "submit", file]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain(`${file}:4:`);
    expect(bad.stderr).toContain("provider");
    const missing = await fleetCli(["batch", "status", "00000000-0000-4000-8000-000000000000"]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/not found/);
  }, 30_000);
});
