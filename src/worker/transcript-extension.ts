/** The built-in `transcript` extension (contracts §8, FLEET_TRANSCRIPT_DIR). */
import { open } from "node:fs/promises";
import { join } from "node:path";
import { makeDirectory, PRIVATE_DIRECTORY_MODE } from "../shared/make-directory.js";
import { type CommittedMessage, type Extension, TRANSCRIPT_EXTENSION } from "./extensions.js";
import { recordOnly } from "./hook-runner.js";
import { appendWhole } from "./tools/whole-append.js";

/** The mode a transcript file is created with (its directory: PRIVATE_DIRECTORY_MODE). */
export const TRANSCRIPT_FILE_MODE = 0o600;

/**
 * The built-in `transcript` extension (FLEET_TRANSCRIPT_DIR): `DIR/<sessionId>.jsonl`, one
 * line `{"runId","seq","message"}` per message a run committed. A resume first records its
 * turn again from the last user message, so the file's last record of each turn is whole.
 * Transcripts hold whole conversations: a file is created 0600 and a directory this makes
 * 0700 (a directory that exists is left as it is); `fleet worker` checks DIR at start
 * (preflight.ts `checkTranscriptDir`).
 */
export function transcriptExtension(
  dir: string,
  /** Sessions deleted while this worker runs: nothing more is written for them (transcript-cleanup.ts). */
  deleted: { has(sessionId: string): boolean } = { has: () => false },
): Extension {
  let made: Promise<unknown> | null = null;
  const write = async (sessionId: string, lines: CommittedMessage[]) => {
    if (lines.length === 0) return;
    const text = lines
      .map((line) => `${JSON.stringify({ runId: line.runId, seq: line.seq, message: line.message })}\n`)
      .join("");
    const append = async () => {
      // A failed mkdir is tried again at the next write: kept, its rejection failed every
      // later write of this worker, also once the directory could be made.
      made ??= makeDirectory(dir, PRIVATE_DIRECTORY_MODE).catch((error: unknown) => {
        made = null;
        throw error;
      });
      await made;
      if (deleted.has(sessionId)) return;
      // Whole lines or none (whole-append.ts): appendFile's 512 KiB pieces, cut by a full disk,
      // left half a line, and the next message's line joined to it.
      const file = join(dir, `${sessionId}.jsonl`);
      // appendWhole closes the handle.
      await appendWhole(await open(file, "a", TRANSCRIPT_FILE_MODE), file, text);
    };
    try {
      await append();
    } catch (error) {
      // The directory went after it was made (removed, a mount gone): made again, once.
      if ((error as NodeJS.ErrnoException).code !== "ENOENT" || made === null) throw error;
      made = null;
      await append();
    }
  };
  const transcript: Extension = {
    name: TRANSCRIPT_EXTENSION,
    async beforeRun(ctx) {
      if (ctx.kind !== "resume") return;
      let start = -1;
      for (let i = ctx.history.length - 1; i >= 0; i--)
        if (ctx.history[i]!.role === "user") {
          start = i;
          break;
        }
      if (start < 0) return;
      await write(
        ctx.sessionId,
        ctx.history.slice(start).map((message) => ({ runId: ctx.runId, seq: message.seq, message })),
      );
    },
    async onCommitted(ctx, committed) {
      await write(ctx.sessionId, [committed]);
    },
  };
  return recordOnly(transcript);
}
