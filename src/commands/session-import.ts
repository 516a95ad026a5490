/**
 * `fleet session import FILE [--metadata JSON] [--idempotency-key KEY]`: makes a new session
 * from a `fleet session export` file (session-file.ts) and prints its id.
 *
 * The file is read twice, a line at a time: once to check all of it before the first request
 * (header, every message as the API validates an import, seqs 1, 2, 3, …, the end line), so
 * a malformed file creates nothing; then to send it: `POST /v1/sessions` with the first page,
 * the rest with `POST /v1/sessions/:id/history` (`importMessages`), pages of at most 10,000
 * messages and 8 MiB; the first leaves room for the agent and metadata beside it, and is
 * empty when none fits (import-requests.ts). Memory holds one page.
 *
 * A request that gets no answer (or a 5xx) is sent again. The session is created with an
 * Idempotency-Key, so a retry gets the same session; a page is stored only right after its
 * `afterSeq`, so a page that was stored though its answer was lost comes back `409
 * seq_mismatch`: the command then reads what the session holds after `afterSeq`, checks it
 * is the file's messages, and goes on after them — nothing is stored twice. Running the
 * command again with the same `--idempotency-key` within 24 h continues the same session the
 * same way. What the API refuses after the first page (a 4xx) ends the command with the seq
 * that failed and what is stored.
 *
 * The file is read by session-import-file.ts, the pages after the first stored by
 * session-import-pages.ts.
 */
import { randomUUID } from "node:crypto";
import { FleetApiError, type FleetClient } from "../producer/client.js";
import type { Spent } from "../shared/imported-spent.js";
import { type ApiOptions, apiClientOf, unreachableLine } from "./api-client.js";
import { type ImportSource, type ImportStdin, openImportSource } from "./import-source.js";
import { onInterrupt } from "./interrupt.js";
import type { ExportHeader, FileMessage } from "./session-file.js";
import { checkFile, filePages } from "./session-import-file.js";
import { checkNothingAfter, reason, storePage } from "./session-import-pages.js";
import {
  guarded,
  ioOf,
  passing,
  retrying,
  TransferError,
  type TransferIo,
  write,
} from "./session-transfer.js";

export type SessionImportOptions = ApiOptions & {
  /** Read for FILE `-`, or no FILE (default process.stdin). */
  stdin?: ImportStdin;
  /** A JSON object merged over the file's metadata (its keys win). */
  metadata?: string;
  /** The Idempotency-Key of the session's creation (default: a new one). */
  idempotencyKey?: string;
  io?: TransferIo;
};

export async function sessionImportCommand(
  /** The file; `-` or undefined: stdin. */
  file: string | undefined,
  options: SessionImportOptions = {},
): Promise<number> {
  const io = ioOf(options.io);
  const { client, ...api } = apiClientOf(options);
  return guarded(io, api, "fleet session import", async () => {
    const extra = parseMetadata(options.metadata);
    const source = await openImportSource(file, options.stdin ?? process.stdin);
    try {
      const { total, spent } = await checkFile(source, extra);
      const key = options.idempotencyKey ?? `fleet-session-import-${randomUUID()}`;
      const id = await sendFile(client, source, total, { extra, key, io, ...(spent ? { spent } : {}) });
      await write(io.stderr, `imported ${total} messages into session ${id}\n`);
      await write(io.stdout, `${id}\n`);
      return 0;
    } finally {
      await source.done();
    }
  });
}

function parseMetadata(text: string | undefined): Record<string, unknown> {
  if (text === undefined) return {};
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    value = undefined;
  }
  if (value === null || typeof value !== "object" || Array.isArray(value))
    throw new TransferError(`--metadata must be a JSON object, e.g. '{"source":"eu-1"}'`, 2);
  return value as Record<string, unknown>;
}

/** `spent`: what the session spent beyond the file's steps (export-spent.ts), sent with its creation. */
type Send = { extra: Record<string, unknown>; key: string; io: TransferIo; spent?: Spent };

async function sendFile(client: FleetClient, file: ImportSource, total: number, send: Send): Promise<string> {
  const { io } = send;
  let header: ExportHeader | undefined;
  let id: string | undefined;
  let lastSeq = 0;
  let sending = false;
  // Ctrl-C or SIGTERM runs no `catch`: the command ended on its last progress line, the
  // session's key (the one way to go on with it) never said.
  const forget = onInterrupt(() => {
    if (!sending && id === undefined) return undefined;
    const line = "fleet session import: stopped; ";
    if (id === undefined)
      return `${line}the session may have been created: run this command again with --idempotency-key ${send.key} (within 24 h) to go on with it rather than make another`;
    const held = `messages 1–${lastSeq} of the file's ${total}${sending ? " (and perhaps the page being sent)" : ""}`;
    return `${line}session ${id} holds ${held} (it runs nothing: delete it with \`fleet session delete ${id}\`, or run this command again with --idempotency-key ${send.key} to go on)`;
  });
  try {
    for await (const item of filePages(file, send.extra)) {
      if ("header" in item) {
        header = item.header;
        continue;
      }
      const { page } = item;
      sending = true;
      if (id === undefined) {
        id = await create(client, header!, page, send);
        sending = false;
        lastSeq = page.length;
        const held =
          lastSeq > 0
            ? `messages 1–${lastSeq} of ${total}`
            : `none of the ${total} messages yet (no message fits beside its agent in one request)`;
        await write(io.stderr, `created session ${id} with ${held}\n`);
        continue;
      }
      lastSeq = await storePage(client, id, lastSeq, page, io);
      sending = false;
      await write(io.stderr, `stored messages up to ${lastSeq} of ${total}\n`);
    }
    // A file of no message: the session is created with none.
    if (id === undefined) {
      sending = true;
      id = await create(client, header!, [], send);
      sending = false;
    }
    await checkNothingAfter(client, id, lastSeq, io);
    forget();
    return id;
  } catch (error) {
    forget();
    if (id === undefined) {
      // No answer (or a 5xx) to every try: the session may have been made. Its key gets it
      // again; without it, running the command again made a second session.
      if (!passing(error) || unreachableLine(error, "", "") !== null) throw error;
      throw new TransferError(
        `creating the session: ${reason(error)}; it may have been created: run this command again with --idempotency-key ${send.key} (within 24 h) to go on with it rather than make another`,
        1,
      );
    }
    // Gone (deleted since its key made it): what the error line said — it holds the file's
    // messages, run again with the key — was wrong, and the key gives it back for 24 h.
    if (error instanceof FleetApiError && error.status === 404)
      throw new TransferError(
        `session ${id} was deleted since this key created it (the key gives the same session for 24 h): run this command again with a new --idempotency-key, or none, to make a new session`,
        2,
      );
    // A 4xx stored nothing of its page; after no answer (or a 5xx) the page may be stored.
    const refused =
      (error instanceof TransferError && error.exitCode === 2) ||
      (error instanceof FleetApiError && error.status < 500);
    const held = `messages 1–${lastSeq} of the file's ${total}${refused ? "" : " (and perhaps the page that failed)"}`;
    throw new TransferError(
      `${reason(error)}; session ${id} holds ${held} (it runs nothing: delete it with \`fleet session delete ${id}\`, or run this command again with --idempotency-key ${send.key} to go on)`,
      error instanceof TransferError
        ? error.exitCode
        : error instanceof FleetApiError && error.status >= 400 && error.status < 500
          ? 2
          : 1,
    );
  }
}

/** Creates the session with the first page, once whatever the retries (its Idempotency-Key). */
async function create(client: FleetClient, header: ExportHeader, page: FileMessage[], send: Send) {
  const input = {
    agent: header.agent as Parameters<FleetClient["createSession"]>[0]["agent"],
    metadata: { ...header.metadata, ...send.extra },
    ...(page.length > 0 ? { messages: page.map((m) => m.message) } : {}),
    ...(header.sessionEvents === false ? { sessionEvents: false } : {}),
    ...(send.spent ? { spentOutsideHistory: send.spent } : {}),
  };
  const { id } = await retrying(
    send.io,
    "creating the session",
    () => client.createSession(input, { idempotencyKey: send.key }),
    true,
  );
  return id;
}
