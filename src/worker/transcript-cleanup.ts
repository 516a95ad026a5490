/**
 * Transcripts of deleted sessions (the built-in `transcript` extension, FLEET_TRANSCRIPT_DIR)
 * are removed from the worker's disk:
 * - at once, when a delete is announced on the cancel channel (deletion-cleanup.ts sends
 *   every deleted session's id, `deleted`, to every worker);
 * - by a pass when the worker starts and then every FLEET_TRANSCRIPT_SWEEP_MS, for deletes it
 *   did not hear of (it was down, or Redis blinked): the pass reads the directory, then asks
 *   Postgres which of those sessions still exist, up to SWEEP_CHUNK ids per query, and removes
 *   the files of the others.
 *
 * A pass never removes the transcript of a live session: a transcript is written only after a
 * message of its session was committed, so a file the pass listed belongs to a session whose
 * row was committed before the pass asked Postgres; not finding that row means it was deleted.
 * A file written after the directory was read is not in the list, so not looked at.
 */
import { readdir, unlink } from "node:fs/promises";
import { join } from "node:path";
import type { Logger } from "pino";

/** Session ids asked about per query. */
export const SWEEP_CHUNK = 1_000;
/** Deleted ids a worker remembers, so that an append already on its way does not recreate the file. */
const REMEMBERED = 10_000;

const TRANSCRIPT_FILE = /^(.+)\.jsonl$/;

/** The session ids of the transcript files among `names` (pure). */
export function transcriptIds(names: readonly string[]): string[] {
  return names.flatMap((name) => {
    const id = TRANSCRIPT_FILE.exec(name)?.[1];
    return id && !id.startsWith(".") ? [id] : [];
  });
}

/** Of `ids`, those that `existing` does not hold (pure). */
export function missingIds(ids: readonly string[], existing: ReadonlySet<string>): string[] {
  return ids.filter((id) => !existing.has(id));
}

export class TranscriptCleanup {
  private readonly forgotten = new Set<string>();

  constructor(
    private readonly dir: string,
    /** Which of these session ids still exist (one query). */
    private readonly existing: (ids: string[]) => Promise<Set<string>>,
  ) {}

  /** Whether the session was deleted while this worker ran (the transcript writes nothing for it). */
  has(sessionId: string): boolean {
    return this.forgotten.has(sessionId);
  }

  /** Removes the transcripts of these deleted sessions; returns how many files went. */
  async remove(sessionIds: readonly string[]): Promise<number> {
    for (const id of sessionIds) {
      this.forgotten.add(id);
      if (this.forgotten.size > REMEMBERED) this.forgotten.delete(this.forgotten.values().next().value!);
    }
    let removed = 0;
    for (const id of sessionIds) if (await this.unlink(id)) removed++;
    return removed;
  }

  /** One pass over the directory: removes the transcripts of sessions that no longer exist. */
  async sweep(): Promise<number> {
    let names: string[];
    try {
      names = await readdir(this.dir);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return 0;
      throw error;
    }
    const ids = transcriptIds(names);
    let removed = 0;
    for (let i = 0; i < ids.length; i += SWEEP_CHUNK) {
      const chunk = ids.slice(i, i + SWEEP_CHUNK);
      for (const id of missingIds(chunk, await this.existing(chunk))) if (await this.unlink(id)) removed++;
    }
    return removed;
  }

  private async unlink(sessionId: string): Promise<boolean> {
    // An id is a file name only when it names a file in the directory itself.
    if (sessionId.includes("/") || sessionId.includes("\\") || sessionId.startsWith(".")) return false;
    try {
      await unlink(join(this.dir, `${sessionId}.jsonl`));
      return true;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return false;
      throw error;
    }
  }
}

/**
 * The passes of a worker (none without a transcript directory): one now, then every
 * `everyMs`; a pass that removed something says so, one that failed is logged and the next
 * tries again. Returns what stops them.
 */
export function startTranscriptSweeps(
  transcripts: TranscriptCleanup | null,
  everyMs: number,
  log: Pick<Logger, "info" | "warn">,
): () => void {
  const sweepTranscripts = () => {
    transcripts
      ?.sweep()
      .then((removed) => {
        if (removed > 0) log.info({ removed }, "removed the transcripts of deleted sessions");
      })
      .catch((error: unknown) =>
        log.warn({ err: error }, "transcript pass failed; the next one tries again"),
      );
  };
  sweepTranscripts();
  const transcriptTimer = setInterval(sweepTranscripts, everyMs);
  transcriptTimer.unref();
  return () => clearInterval(transcriptTimer);
}
