/**
 * `fleet session export ID --out FILE` where FILE is not a plain new file: a FIFO (what
 * `>(…)` gives) or a device is written into as it is, and a symbolic link's target gets the
 * export, the link kept. The export used to be written beside FILE and renamed over it, which
 * replaced the FIFO, the link — or, run as root, /dev/null — with a regular file.
 */
import { execFileSync, spawn } from "node:child_process";
import { lstat, mkdir, mkdtemp, open, readdir, readFile, rm, symlink } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { exitedWithOutput } from "./support/child-exit.js";
import { runFleetCli } from "./support/fleet-cli.js";
import { createFleetEnv, FLEET_BIN, type FleetEnv } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] }, maxTurns: 3 };
let fleet: FleetEnv;
let client: FleetClient;
let url: string;
let id: string;
let batchId: string;

beforeAll(async () => {
  fleet = await createFleetEnv("export-out");
  const started = await fleet.startApi();
  client = started.client;
  url = started.api.url;
  ({ id } = await client.createSession({
    agent: AGENT,
    messages: [
      { role: "user", content: "hi" },
      { role: "assistant", content: "hello", stopReason: "end_turn" },
    ],
  }));
  ({ id: batchId } = await client.createBatch([{ agent: AGENT, input: "hi" }]));
}, 60_000);
afterAll(async () => fleet?.close());

const cli = (args: string[]) => runFleetCli(args, { ...fleet.env, FLEET_API_URL: url }, 120_000);

/** The export's lines without the header's exportedAt (it differs between two exports). */
const comparable = (text: string) =>
  text
    .trimEnd()
    .split("\n")
    .map((line) => JSON.parse(line) as Record<string, unknown>)
    .map(({ exportedAt: _exportedAt, ...rest }) => rest);

describe("fleet session export --out FILE that already exists as no plain file", () => {
  it("a FIFO: the export is written into it, and it stays a FIFO", async () => {
    const fifo = join(fleet.config.toolDir, "out.fifo");
    execFileSync("mkfifo", [fifo]);
    // A reader of the FIFO, as `>(jq …)` would be.
    const reader = spawn("cat", [fifo], { stdio: ["ignore", "pipe", "ignore"] });
    let read = "";
    reader.stdout.on("data", (d) => {
      read += d;
    });
    const readerDone = new Promise((resolve) => reader.on("close", resolve));
    try {
      const result = await cli(["session", "export", id, "--out", fifo]);
      expect(result.code, result.stderr).toBe(0);
      expect((await lstat(fifo)).isFIFO()).toBe(true);
      await readerDone;
      const stdout = await cli(["session", "export", id]);
      expect(comparable(read)).toEqual(comparable(stdout.stdout));
    } finally {
      reader.kill("SIGKILL");
    }
  }, 120_000);

  it("a symbolic link: its target gets the export, the link stays", async () => {
    const dir = join(fleet.config.toolDir, "elsewhere");
    await mkdir(dir);
    const target = join(dir, "target.jsonl");
    const link = join(fleet.config.toolDir, "link.jsonl");
    await symlink(target, link);
    const result = await cli(["session", "export", id, "--out", link]);
    expect(result.code, result.stderr).toBe(0);
    expect((await lstat(link)).isSymbolicLink()).toBe(true);
    const written = await readFile(target, "utf8");
    expect(written).toMatch(/"fleetSessionExportEnd":\{"messages":2,"spent":\{/);
    expect((await lstat(target)).mode & 0o777).toBe(0o600);
  }, 120_000);
});

describe("a stdout that cannot be written (a full disk)", () => {
  it.each([
    ["session export", () => ["session", "export", id]],
    ["batch results", () => ["batch", "results", batchId]],
  ])(
    "fleet %s: one line naming stdout, exit 1, not the last-resort stop",
    async (_name, args) => {
      const full = await open("/dev/full", "w");
      try {
        const child = spawn(process.execPath, [FLEET_BIN, ...args()], {
          env: { ...process.env, ...fleet.env, FLEET_API_URL: url },
          stdio: ["ignore", full.fd, "pipe"],
        });
        let stderr = "";
        child.stderr?.on("data", (d) => {
          stderr += d;
        });
        const code = await exitedWithOutput(child);
        expect(stderr).toBe(
          `fleet ${args()[0]}: cannot write stdout: ENOSPC: no space left on device, write\n`,
        );
        expect(code).toBe(1);
      } finally {
        await full.close();
      }
    },
    120_000,
  );
});

/**
 * `--out -`: stdout, as `-` is stdin to `fleet session import` (and `fleet batch submit`).
 * It wrote a file named `-` in the working folder, and nothing on stdout: `fleet session export
 * ID --out - | fleet session import -` imported an empty input.
 */
describe("--out -", () => {
  it("writes the export on stdout and no file named -", async () => {
    const dir = await mkdtemp(join(tmpdir(), "export-out-dash-"));
    try {
      const run = await runFleetCli(
        ["session", "export", id, "--out", "-"],
        { ...fleet.env, FLEET_API_URL: url },
        120_000,
        dir,
      );
      expect([run.code, run.stderr]).toEqual([0, `exported 2 messages of session ${id}\n`]);
      expect(JSON.parse(run.stdout.split("\n")[0]!)).toMatchObject({ fleetSessionExport: 1, id });
      expect(run.stdout.trimEnd().split("\n")).toHaveLength(4);
      expect(await readdir(dir)).toEqual([]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }, 120_000);
});
