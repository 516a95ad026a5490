/**
 * The built-in transcript appends a message's line whole or not at all. It wrote with
 * `appendFile`, which writes in 512 KiB pieces and stops at the first error: a write cut by the
 * file system (here a real one, the file-size limit of `ulimit -f` in a child process) left half
 * a JSON line, and the next message's line was appended to it, so neither could be read —
 * though a line that cannot be written is documented as lost, not as breaking the next one.
 */
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RunContext } from "../src/worker/extensions.js";
import { transcriptExtension } from "../src/worker/transcript-extension.js";
import { underFileSizeLimit } from "./support/file-size-limit.js";
import { ROOT } from "./support/fleet-env.js";

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "fleet-transcript-whole-"));
});
afterAll(async () => rm(dir, { recursive: true, force: true }));

const message = (seq: number, content: string) => ({
  role: "assistant" as const,
  content,
  stopReason: "end_turn" as const,
  seq,
  createdAt: "2026-12-06T00:00:00.000Z",
});
const ctx = { sessionId: "s", runId: "r" } as RunContext;

describe("the transcript", () => {
  it("cut by the file system leaves no half line: the next message's line reads whole", async () => {
    const file = join(dir, "s.jsonl");
    const first = `${JSON.stringify({ runId: "r", seq: 1, message: message(1, "hi") })}\n`;
    await writeFile(file, first, { mode: 0o600 });
    const source = pathToFileURL(join(ROOT, "src/worker/transcript-extension.ts")).href;
    // 1 KiB allowed: the kernel takes part of the 3000-character message's line, then EFBIG.
    const outcome = underFileSizeLimit<string>(
      1,
      `const { transcriptExtension } = await import(${JSON.stringify(source)});
      const transcript = transcriptExtension(${JSON.stringify(dir)});
      const committed = { runId: "r", seq: 2, message: ${JSON.stringify(message(2, "b".repeat(3000)))} };
      const outcome = await transcript.onCommitted({ sessionId: "s", runId: "r" }, committed).then(() => "written", (error) => error.code);
      console.log(JSON.stringify(outcome));`,
    );
    expect(outcome).toBe("EFBIG");
    // Before: the first line, then about 1000 characters of the second and no newline.
    expect(await readFile(file, "utf8")).toBe(first);
    await transcriptExtension(dir).onCommitted!(ctx, { runId: "r", seq: 3, message: message(3, "after") });
    const lines = (await readFile(file, "utf8")).trim().split("\n");
    expect(lines.map((line) => (JSON.parse(line) as { seq: number }).seq)).toEqual([1, 3]);
  }, 60_000);
});
