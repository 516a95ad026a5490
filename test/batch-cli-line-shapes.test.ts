/**
 * `fleet batch submit` of a file whose later line is no session the API takes: a field misspelt
 * (`"inptu"`), the agent left out, a provider that does not exist, an input that is no string.
 * Only JSON and repeated customIds were checked before the first part was sent; the API refused
 * such a line in the part that held it, after the 1,000 sessions of the parts before had been
 * created and started (model calls spent), and the command cancelled them. Each line is now
 * also read as the API reads a batch's session — its fields, and its agent — before anything is
 * sent, and a bad one named by file and line (without the request's `sessions[i]`), exit 2.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runFleetCli } from "./support/fleet-cli.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted", steps: [{ text: "ok" }] } };
const line = (i: number) => JSON.stringify({ customId: `l-${i}`, agent: AGENT, input: `question ${i}` });

describe("fleet batch submit: a line past the first part that the API would refuse", () => {
  let fleet: FleetEnv;
  let url: string;
  let dir: string;

  beforeAll(async () => {
    fleet = await createFleetEnv("batch-cli-line-shapes");
    url = (await fleet.startApi()).api.url;
    dir = await mkdtemp(join(tmpdir(), "fleet-batch-shapes-"));
  }, 60_000);
  afterAll(async () => {
    await fleet?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it.each([
    ["a misspelt field", { agent: AGENT, inptu: "q" }, "inptu: unknown field"],
    ["no agent", { input: "q" }, "agent: is required"],
    [
      "a provider that does not exist",
      { agent: { model: { provider: "opnai", model: "x" } }, input: "q" },
      "agent.model.provider: must be one of",
    ],
    ["an input that is no string", { agent: AGENT, input: 5 }, "input: expected string, received number"],
  ])(
    "%s: named by file and line, exit 2, nothing sent",
    async (_what, bad, said) => {
      const file = join(dir, "bad.jsonl");
      // Line 1,100 is in the second part.
      const lines = Array.from({ length: 1_200 }, (_, i) => (i === 1_099 ? JSON.stringify(bad) : line(i)));
      await writeFile(file, `${lines.join("\n")}\n`);
      const submitted = await runFleetCli(["batch", "submit", file], { ...fleet.env, FLEET_API_URL: url });
      expect(submitted.code, submitted.stderr).toBe(2);
      expect(submitted.stderr).toContain(`fleet batch submit: ${file}:1100: ${said}`);
      expect(submitted.stderr).not.toContain("sessions[");
      const [stored] = await fleet.database.sql<{ batches: number; sessions: number; runs: number }[]>`
      select (select count(*)::int from batches) as batches, (select count(*)::int from sessions) as sessions,
             (select count(*)::int from runs) as runs`;
      expect(stored).toEqual({ batches: 0, sessions: 0, runs: 0 });
    },
    120_000,
  );
});
