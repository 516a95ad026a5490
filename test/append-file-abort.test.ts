/**
 * A failed append's repair (whole-append.ts) waits for the other appends of this process to the
 * file, and new appends wait for the repair. Neither wait looked at the tool call's signal: a
 * call cancelled or past its time limit went on waiting as long as the repair did (here, for
 * as long as another append's write is held), holding its tool slot and its run. Now an
 * aborted call stops waiting: one whose own append failed throws that failure at once, and
 * its repair goes on without it, the file's handle kept open until it is done, so its part is
 * still cut off (no half line); one waiting for another's repair appends nothing and says so.
 *
 * The appends held here are real writes to a real file; only when a write returns (and a
 * write cut short, as EFBIG cuts one) is steered, through a handle that wraps the real one.
 */

import type { FileHandle } from "node:fs/promises";
import { open, readFile, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { executeTool } from "../src/worker/tools/execute-tool.js";
import { appendWhole } from "../src/worker/tools/whole-append.js";
import { useBuiltinTools } from "./support/builtin-tools.js";
import { waitFor } from "./support/fleet-env.js";

const fixture = useBuiltinTools("fleet-append-abort-");

type Write = (bytes: Buffer, offset: number, length: number) => Promise<{ bytesWritten: number }>;

/** A handle on `file` (O_APPEND) whose writes go through `write`, given the real handle's. */
async function steered(
  file: string,
  write: (real: FileHandle) => Write,
): Promise<{ handle: FileHandle; closed: () => boolean }> {
  const real = await open(file, "a");
  let closed = false;
  const handle = {
    fd: real.fd,
    write: write(real),
    stat: () => real.stat(),
    truncate: (length: number) => real.truncate(length),
    close: async () => {
      closed = true;
      await real.close();
    },
  } as unknown as FileHandle;
  return { handle, closed: () => closed };
}

const append = (line: string, signal: AbortSignal) =>
  executeTool(
    fixture.registry.get("append_file"),
    "append_file",
    { path: "log.txt", line },
    { callId: "c", callKey: "k", sessionId: "s", signal },
    // Long: the call must settle by itself, not be abandoned by executeTool's grace.
    { abandonAfterMs: 600_000 },
  );

describe("append_file aborted while a failed append's repair waits", () => {
  it("stops waiting; the part is still cut off once the repair can run, and no line is half", async () => {
    const file = join(fixture.toolDir, "log.txt");
    await writeFile(file, "first\n");
    const { dev, ino } = await stat(file);
    const key = `${dev}:${ino}`;

    // B: an append whose write has reached the file but not returned yet (held).
    let wroteB!: () => void;
    const bWrote = new Promise<void>((resolve) => {
      wroteB = resolve;
    });
    let releaseB!: () => void;
    const held = new Promise<void>((resolve) => {
      releaseB = resolve;
    });
    const b = await steered(file, (real) => async (bytes, offset, length) => {
      const result = await real.write(bytes, offset, length);
      wroteB();
      await held;
      return result;
    });
    const bDone = appendWhole(b.handle, key, "second\n");
    await bWrote;

    // A: an append the file system cuts after 5 bytes (as EFBIG does); its repair waits for B.
    let writesA = 0;
    const a = await steered(file, (real) => async (bytes, offset) => {
      writesA++;
      if (writesA === 1) return real.write(bytes, offset, 5);
      throw Object.assign(new Error("EFBIG: file too large, write"), { code: "EFBIG", syscall: "write" });
    });
    const callA = new AbortController();
    const aDone = appendWhole(a.handle, key, `${"b".repeat(100)}\n`, callA.signal).then(
      () => null,
      (error: unknown) => error,
    );
    await waitFor(() => writesA === 2, 10_000, "A's cut write");

    // C: the built-in tool's call to the same file, which waits for A's repair.
    const callC = new AbortController();
    const cDone = append("third", callC.signal);
    // Aborted once the tool runs (its arguments are checked first, asynchronously: aborted
    // before the tool starts, the call runs no tool and is answered as not started).
    await new Promise((resolve) => setTimeout(resolve, 100));

    callA.abort(new Error("session cancelled"));
    callC.abort(new Error("session cancelled"));
    // Before: both waited until B's write returned (here: never, so the test timed out).
    expect(await aDone).toMatchObject({ code: "EFBIG" });
    expect(await cDone).toEqual({
      success: false,
      content:
        "nothing was appended: the call was stopped (session cancelled) while it waited for the repair of another append to the file",
    });
    // The repair has not run (B still holds it up), and A's handle is kept open for it.
    expect(await readFile(file, "utf8")).toBe("first\nsecond\nbbbbb");
    expect(a.closed()).toBe(false);

    releaseB();
    await bDone;
    // A later call waits for the repair, then appends after whole lines only.
    expect(await append("fourth", new AbortController().signal)).toEqual({
      success: true,
      content: "appended to log.txt",
    });
    expect(await readFile(file, "utf8")).toBe("first\nsecond\nfourth\n");
    await waitFor(() => a.closed() && b.closed(), 10_000, "both handles closed");
  }, 60_000);
});
