/**
 * TranscriptCleanup on a real directory: a pass removes only the transcripts of sessions
 * Postgres no longer has, in chunks of SWEEP_CHUNK ids per query, never a file written after
 * it read the directory, never a file that is no transcript; a removal announced by a delete
 * stops later appends for that session.
 */
import { existsSync } from "node:fs";
import { mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  missingIds,
  SWEEP_CHUNK,
  TranscriptCleanup,
  transcriptIds,
} from "../src/worker/transcript-cleanup.js";
import { transcriptExtension } from "../src/worker/transcript-extension.js";

describe("transcript cleanup", () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "transcripts-"));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("pure parts: ids of transcript files only; the ids Postgres lacks", () => {
    expect(transcriptIds(["a.jsonl", "b.txt", ".hidden.jsonl", "c.jsonl.tmp", "d.jsonl"])).toEqual([
      "a",
      "d",
    ]);
    expect(missingIds(["a", "b", "c"], new Set(["b"]))).toEqual(["a", "c"]);
  });

  it("a pass removes the files of missing sessions, keeps live ones, and one written after it read the directory", async () => {
    for (const name of ["live.jsonl", "gone.jsonl", "notes.txt"]) await writeFile(join(dir, name), "x");
    const asked: string[][] = [];
    const cleanup = new TranscriptCleanup(dir, async (ids) => {
      asked.push(ids);
      // A session created (and its first message's transcript written) while the pass runs:
      // the query does not find it, but the pass never listed its file.
      await writeFile(join(dir, "new.jsonl"), "x");
      return new Set(["live"]);
    });
    expect(await cleanup.sweep()).toBe(1);
    expect((await readdir(dir)).sort()).toEqual(["live.jsonl", "new.jsonl", "notes.txt"]);
    expect(asked.map((ids) => ids.sort())).toEqual([["gone", "live"]]);
  });

  it("asks Postgres at most SWEEP_CHUNK ids at a time", async () => {
    const n = SWEEP_CHUNK + 5;
    await Promise.all(Array.from({ length: n }, (_, i) => writeFile(join(dir, `s${i}.jsonl`), "x")));
    const sizes: number[] = [];
    const cleanup = new TranscriptCleanup(dir, async (ids) => {
      sizes.push(ids.length);
      return new Set(ids.filter((id) => Number(id.slice(1)) % 2 === 0));
    });
    expect(await cleanup.sweep()).toBe(Math.floor(n / 2));
    expect(sizes).toEqual([SWEEP_CHUNK, 5]);
    expect((await readdir(dir)).length).toBe(n - Math.floor(n / 2));
  });

  it("a missing directory is no error; remove() takes only names inside it and stops later appends", async () => {
    expect(await new TranscriptCleanup(join(dir, "nope"), async () => new Set()).sweep()).toBe(0);
    await writeFile(join(dir, "s1.jsonl"), "x");
    await writeFile(join(dir, "..s2.jsonl"), "x");
    const cleanup = new TranscriptCleanup(dir, async () => new Set());
    expect(await cleanup.remove(["s1", "../s1", ".", "absent"])).toBe(1);
    expect(existsSync(join(dir, "s1.jsonl"))).toBe(false);
    // The transcript extension writes nothing more for it (an append that was on its way).
    const extension = transcriptExtension(dir, cleanup);
    const committed = { runId: "r", seq: 2, message: { seq: 2, role: "user", content: "late" } as never };
    await extension.onCommitted!({ sessionId: "s1" } as never, committed);
    await extension.onCommitted!({ sessionId: "s3" } as never, committed);
    expect(existsSync(join(dir, "s1.jsonl"))).toBe(false);
    expect(existsSync(join(dir, "s3.jsonl"))).toBe(true);
  });
});
