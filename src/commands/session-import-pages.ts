/**
 * Storing an import's pages after the first (session-import.ts) through the API, and what a
 * failure says: a page whose answer was lost is found stored (409 seq_mismatch) and checked to
 * be the file's, then the command goes on after it; at the end, nothing may follow the file's
 * last message.
 */
import { FleetApiError, type FleetClient } from "../producer/client.js";
import { ExportFileError, type FileMessage, sameMessage } from "./session-file.js";
import { retrying, TransferError, type TransferIo, write } from "./session-transfer.js";

/** What a failure of the import says of its cause. */
export function reason(error: unknown): string {
  if (error instanceof ExportFileError)
    return `line ${error.line}: ${error.message} (the file changed while it was imported)`;
  if (error instanceof FleetApiError && error.field) return `${error.message} (${error.field})`;
  return error instanceof Error ? error.message : String(error);
}

/**
 * Stores `page` right after seq `afterSeq`; resolves with the session's last seq after it.
 * A 409 seq_mismatch (a try stored though its answer was lost; or an earlier run of the
 * command) reads what the session holds after `afterSeq`, checks it is this page's start,
 * and sends only the rest.
 */
export async function storePage(
  client: FleetClient,
  id: string,
  afterSeq: number,
  page: FileMessage[],
  io: TransferIo,
): Promise<number> {
  let sent = 0;
  for (;;) {
    const from = afterSeq + sent;
    const rest = page.slice(sent);
    const range = `seq ${from + 1}–${from + rest.length}`;
    try {
      const { lastSeq } = await retrying(io, `storing ${range}`, () =>
        client.importMessages(
          id,
          rest.map((m) => m.message),
          { afterSeq: from },
        ),
      );
      return lastSeq;
    } catch (error) {
      if (!(error instanceof FleetApiError && error.reason === "seq_mismatch")) {
        if (error instanceof FleetApiError) {
          // The session is gone: said by the command (session-import.ts), not as a refused page.
          if (error.status === 404) throw error;
          const index = /^messages\[(\d+)\]/.exec(error.field ?? "");
          const at = index ? rest[Number(index[1])] : undefined;
          if (at) throw new TransferError(`seq ${at.seq} (line ${at.line}): ${error.message}`, 2);
          throw new TransferError(`${range}: ${reason(error)}`, error.status < 500 ? 2 : 1);
        }
        throw error;
      }
      const stored = await storedPrefix(client, id, from, rest, io);
      await write(
        io.stderr,
        `${range}: the session holds seq ${from + 1}–${from + stored} already (an answer was lost); going on after seq ${from + stored}\n`,
      );
      sent += stored;
      if (sent === page.length) return afterSeq + sent;
    }
  }
}

/** How many of `rest` the session holds after seq `from` (at least one), checked to be the file's. */
async function storedPrefix(
  client: FleetClient,
  id: string,
  from: number,
  rest: FileMessage[],
  io: TransferIo,
): Promise<number> {
  const { messages } = await retrying(io, `reading session ${id} after seq ${from}`, () =>
    client.getSession(id, { afterSeq: from, limit: rest.length, runsLimit: 0 }),
  );
  if (messages.length === 0)
    throw new TransferError(
      `the API refused the page after seq ${from} (seq_mismatch) but the session holds nothing after it`,
      1,
    );
  for (const [i, stored] of messages.entries()) {
    const mine = rest[i]!;
    if (stored.seq !== mine.seq || !sameMessage(stored, mine.message))
      throw new TransferError(
        `seq ${stored.seq} is stored with another message than line ${mine.line} of the file: something else writes to session ${id}`,
        1,
      );
  }
  return messages.length;
}

/** The session ends where the file does: nothing of another writer (or an older run) after it. */
export async function checkNothingAfter(client: FleetClient, id: string, lastSeq: number, io: TransferIo) {
  const { messages } = await retrying(io, `reading session ${id}`, () =>
    client.getSession(id, { afterSeq: lastSeq, limit: 1, runsLimit: 0 }),
  );
  if (messages.length > 0)
    throw new TransferError(`the session holds messages after the file's last (seq ${lastSeq})`, 1);
}
