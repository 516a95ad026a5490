/**
 * The transcript (contracts §8) whose directory cannot be made at first (a mount not there
 * yet, a file in its place): the write fails (counted as a failed onCommitted), and a later
 * one makes the directory once it can. Before, the failed mkdir was kept, and every later
 * write of that worker failed until it restarted.
 */
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { transcriptExtension } from "../src/worker/transcript-extension.js";

describe("transcript directory", () => {
  let root: string | null = null;
  afterEach(async () => {
    if (root) await rm(root, { recursive: true, force: true });
  });

  it("a directory that could not be made is made at a later write", async () => {
    root = await mkdtemp(join(tmpdir(), "transcript-dir-"));
    const blocker = join(root, "mount");
    await writeFile(blocker, "not a directory");
    const dir = join(blocker, "transcripts");
    const transcript = transcriptExtension(dir);
    const ctx = { sessionId: "s1" } as Parameters<NonNullable<typeof transcript.onCommitted>>[0];
    const line = (seq: number) => ({
      runId: "r1",
      seq,
      message: { role: "user" as const, content: `m${seq}`, seq, createdAt: "2026-12-04T00:00:00.000Z" },
    });
    await expect(transcript.onCommitted!(ctx, line(1))).rejects.toThrow(/ENOTDIR/);
    await rm(blocker);
    await mkdir(blocker);
    await transcript.onCommitted!(ctx, line(2));
    const lines = (await readFile(join(dir, "s1.jsonl"), "utf8")).trim().split("\n");
    expect(lines.map((l) => JSON.parse(l).seq)).toEqual([2]);
  });
});
