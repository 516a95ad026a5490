/**
 * Transcripts hold whole conversations (contracts §8): their files are created 0600 and a
 * directory the worker makes for them 0700, while a directory that exists keeps its mode. A
 * FLEET_TRANSCRIPT_DIR the worker cannot use stops `fleet worker` at start, one line and
 * exit 2, instead of failing every transcript write of the run; a directory that goes away
 * while the worker runs is made again at the next write.
 */
import { execFile } from "node:child_process";
import { chmod, mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { transcriptExtension } from "../src/worker/transcript-extension.js";
import { createFleetEnv, FLEET_BIN, type FleetEnv, ROOT } from "./support/fleet-env.js";

const run = promisify(execFile);

const line = (seq: number) => ({
  runId: "r1",
  seq,
  message: { role: "user" as const, content: `m${seq}`, seq, createdAt: "2026-12-04T00:00:00.000Z" },
});

function committer(dir: string) {
  const transcript = transcriptExtension(dir);
  return (sessionId: string, seq: number) =>
    transcript.onCommitted!(
      { sessionId } as Parameters<NonNullable<typeof transcript.onCommitted>>[0],
      line(seq),
    );
}

const modeOf = async (path: string) => (await stat(path)).mode & 0o777;

describe("transcript files and directories", () => {
  let root: string;
  const umask = process.umask(0o022);
  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "transcript-files-"));
  });
  afterAll(async () => {
    process.umask(umask);
    await rm(root, { recursive: true, force: true });
  });

  it("a file is created 0600; the directory and its missing parents are made 0700", async () => {
    const dir = join(root, "made", "transcripts");
    const commit = committer(dir);
    await commit("s1", 1);
    await commit("s1", 2);
    expect((await modeOf(join(dir, "s1.jsonl"))).toString(8)).toBe("600");
    expect((await modeOf(dir)).toString(8)).toBe("700");
    expect((await modeOf(join(root, "made"))).toString(8)).toBe("700");
  });

  it("a directory that exists keeps its mode (its files are 0600 still)", async () => {
    const dir = join(root, "operators");
    await mkdir(dir);
    await chmod(dir, 0o750);
    await committer(dir)("s2", 1);
    expect((await modeOf(dir)).toString(8)).toBe("750");
    expect((await modeOf(join(dir, "s2.jsonl"))).toString(8)).toBe("600");
  });

  it("a directory removed while the worker runs is made again at the next write", async () => {
    const dir = join(root, "removed");
    const commit = committer(dir);
    await commit("s3", 1);
    await rm(dir, { recursive: true });
    await commit("s3", 2);
    const lines = (await readFile(join(dir, "s3.jsonl"), "utf8")).trim().split("\n");
    expect(lines.map((l) => JSON.parse(l).seq)).toEqual([2]);
    expect((await modeOf(dir)).toString(8)).toBe("700");
  });
});

describe("fleet worker checks FLEET_TRANSCRIPT_DIR at start", () => {
  let fleetEnv: FleetEnv;
  let root: string;
  beforeAll(async () => {
    fleetEnv = await createFleetEnv("transcriptfiles");
    root = await mkdtemp(join(tmpdir(), "transcript-start-"));
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
    await fleetEnv?.close();
  });
  async function worker(transcriptDir: string) {
    try {
      const { stdout, stderr } = await run(process.execPath, [FLEET_BIN, "worker"], {
        cwd: ROOT,
        env: { ...process.env, ...fleetEnv.env, FLEET_TRANSCRIPT_DIR: transcriptDir },
        timeout: 20_000,
      });
      return { code: 0, stdout, stderr };
    } catch (error) {
      const e = error as { code: number; stdout: string; stderr: string };
      return { code: e.code, stdout: e.stdout, stderr: e.stderr };
    }
  }

  it("a file in its place, or in place of a parent: exit 2, one line naming it, no stack", async () => {
    const file = join(root, "a-file");
    await writeFile(file, "not a directory");
    const results = await Promise.all([worker(file), worker(join(file, "transcripts"))]);
    for (const [i, result] of results.entries()) {
      expect(result.code, result.stdout + result.stderr).toBe(2);
      expect(result.stdout).not.toMatch(/ready/);
      const lines = result.stderr.trim().split("\n");
      expect(lines, result.stderr).toHaveLength(1);
      expect(lines[0]).toMatch(
        new RegExp(
          `^fleet worker: FLEET_TRANSCRIPT_DIR: cannot write transcripts in ${i === 0 ? file : join(file, "transcripts")} \\(ENOTDIR\\)`,
        ),
      );
    }
  }, 60_000);
});
