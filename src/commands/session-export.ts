/**
 * `fleet session export ID [--out FILE]`: the session's agent, metadata and every message
 * (with seq and createdAt, contracts §1) as JSON Lines (session-file.ts), read from the API
 * page by page (`GET /v1/sessions/:id?afterSeq=N&limit=…`, no runs) and written as each page
 * comes: memory holds one page, whatever the session's length.
 *
 * A session that runs while it is exported: each page asks for the messages after the last
 * seq written, and every seq is checked to follow the one before, so the file is the
 * session's messages 1…N with no gap and no repeat, N being the last one stored when the
 * last page was read (messages are only ever appended). A page that breaks that rule stops
 * the export (exit 1) and, with --out, leaves no file behind.
 */
import { rmSync, type Stats } from "node:fs";
import { lstat, open, readlink, realpath, rename, rm, stat } from "node:fs/promises";
import { dirname, resolve } from "node:path";
import type { FleetClient, SessionJson } from "../producer/client.js";
import { type ApiOptions, apiClientOf } from "./api-client.js";
import { onInterrupt } from "./interrupt.js";
import { endLine, headerLine, seqProblem } from "./session-file.js";
import { guarded, ioOf, retrying, TransferError, type TransferIo, write } from "./session-transfer.js";

/** Messages per request. */
const EXPORT_PAGE = 2_000;

export type SessionExportOptions = ApiOptions & {
  /** Write here (through a temporary file renamed at the end) instead of stdout. */
  out?: string;
  io?: TransferIo;
  /** Messages per request (default 2,000; at most the API's 10,000). */
  pageSize?: number;
};

export async function sessionExportCommand(id: string, options: SessionExportOptions = {}): Promise<number> {
  const io = ioOf(options.io);
  const { client, ...api } = apiClientOf(options);
  const what = "fleet session export";
  return guarded(io, api, what, async () => {
    const { out } = options;
    // `-` is stdout, as it is stdin to `fleet session import`: it wrote a file named `-`.
    if (out === undefined || out === "-") {
      const count = await exportTo(client, id, (text) => write(io.stdout, text), io, options, false);
      await write(io.stderr, `exported ${count} messages of session ${id}\n`);
      return 0;
    }
    // Said before anything is read: a folder was found only by the rename of the whole export.
    if (out === "") throw new TransferError("--out: must name a file", 2);
    const found = await stat(out).catch(() => undefined);
    const way = outWay(found);
    if (way === "folder") throw new TransferError(`--out: ${out} is a folder, not a file`, 2);
    // A link: its target gets the export (a rename over FILE replaced the link with a file).
    const path = way === "direct" ? out : found ? await realpath(out) : await linkTarget(out);
    const cannotWrite = (error: NodeJS.ErrnoException) => {
      throw new TransferError(`cannot write ${out}: ${error.code ?? error.message}`, 2);
    };
    // Written under another name and renamed once whole: FILE is an export or is not there.
    // A FIFO or a device (`>(jq …)`, /dev/stdout, /dev/null) is written into as it comes:
    // renamed over, it was replaced by a regular file.
    const temporary = way === "direct" ? path : `${path}.${process.pid}.partial`;
    // Only its owner may read it: a session's messages (as transcripts, transcript-extension.ts).
    const file = await open(temporary, "w", 0o600).catch(cannotWrite);
    // Ctrl-C or SIGTERM runs no `finally`: the partial file stayed beside FILE.
    const forget = onInterrupt(() => {
      if (way !== "replace") return `fleet session export: stopped; ${out} holds part of the export`;
      rmSync(temporary, { force: true });
      return `fleet session export: stopped; ${out} was not written`;
    });
    try {
      const count = await exportTo(
        client,
        id,
        (text) => file.write(text).then(() => {}),
        io,
        options,
        way === "replace",
      );
      await file.close();
      if (way === "replace") await rename(temporary, path);
      await write(io.stderr, `exported ${count} messages of session ${id} to ${out}\n`);
      return 0;
    } catch (error) {
      await file.close().catch(() => {});
      if (way === "replace") await rm(temporary, { force: true });
      if ((error as NodeJS.ErrnoException).syscall !== undefined)
        throw new TransferError(`cannot write ${out}: ${(error as Error).message}`, 1);
      throw error;
    } finally {
      forget();
    }
  });
}

/**
 * How --out writes what its path names (pure): nothing or a regular file is replaced by a
 * file renamed into place once whole; a FIFO, a device or a socket is written into directly.
 */
export function outWay(found: Stats | undefined): "replace" | "direct" | "folder" {
  if (found === undefined || found.isFile()) return "replace";
  return found.isDirectory() ? "folder" : "direct";
}

/** The path a link that leads to nothing (yet) names once its links are followed. */
async function linkTarget(path: string): Promise<string> {
  let current = path;
  // As many links as Linux follows; a loop then fails at open (ELOOP), named.
  for (let hops = 0; hops < 40; hops++) {
    const found = await lstat(current).catch(() => undefined);
    if (!found?.isSymbolicLink()) return current;
    const target = await readlink(current).catch(() => undefined);
    if (target === undefined) return current;
    current = resolve(dirname(current), target);
  }
  return current;
}

/** Writes the export of session `id`, a page at a time, to `sink`; resolves with its number of messages. */
async function exportTo(
  client: FleetClient,
  id: string,
  sink: (text: string) => Promise<void>,
  io: TransferIo,
  options: SessionExportOptions,
  /** Whether the export goes to a file renamed into place once whole. */
  renamed: boolean,
): Promise<number> {
  const limit = options.pageSize ?? EXPORT_PAGE;
  const page = (afterSeq: number, first = false): Promise<SessionJson> =>
    retrying(
      io,
      `reading session ${id} after seq ${afterSeq}`,
      () => client.getSession(id, { afterSeq, limit, runsLimit: 0 }),
      first,
    );
  let current = await page(0, true);
  await sink(headerLine(current, new Date()));
  let written = 0;
  for (;;) {
    let text = "";
    for (const message of current.messages) {
      const problem = seqProblem(written + 1, message.seq);
      if (problem) {
        await sink(text);
        const left = renamed
          ? "no file was written"
          : "the output ends without its end line (fleet session import refuses it)";
        throw new TransferError(`session ${id}: ${problem}; ${left}`, 1);
      }
      text += `${JSON.stringify(message)}\n`;
      written = message.seq;
    }
    await sink(text);
    // null: nothing follows this page now; absent: an API without paging sent every message.
    if (current.nextAfterSeq === null || current.nextAfterSeq === undefined) break;
    current = await page(written);
  }
  // Read with the last page, after every message written: what was spent by then.
  await sink(endLine(written, current.spent));
  return written;
}
