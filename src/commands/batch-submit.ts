/**
 * `fleet batch submit FILE.jsonl` (contracts §9): a JSONL file submitted as one batch (the
 * other `fleet batch …` commands are batch.ts).
 *
 * `submit` reads the file twice, line by line (one `{customId?, agent, input, metadata?,
 * messages?, sessionEvents?}` per line): first every line is checked, so that a line that is
 * not a JSON object, or a customId given twice, creates nothing wherever it is (stdin, `-`, is
 * first copied to a private temporary file: batch-file.ts); then it is sent in parts of at
 * most 1,000 sessions, PART_BYTES of lines (half the API's body limit) and 50,000 imported
 * messages, each with an Idempotency-Key of its own (a part retried after a network error or
 * a 5xx acts once).
 * A file of more than one part becomes one batch: the first part creates it `open`, the
 * next ones are appended (`POST /v1/batches/:id/sessions`), and the last one closes it —
 * an open batch never ends, so its webhook cannot fire before every part is in. A part is
 * sent once the next line has been read, so the last part is always known.
 * Progress goes to stderr: a bar (cli-progress) on a terminal, plain lines otherwise;
 * stdout gets the batch id (or, with `--wait`, the batch JSON once it has ended).
 *
 * The parts: batch-file.ts (the file's lines, each read as a session), batch-send.ts (a part
 * sent, waiting when asked to), batch-progress.ts (the bar or lines on stderr), batch-wait.ts
 * (`--wait`: the batch polled until it has ended).
 */
import { randomUUID } from "node:crypto";
import type { Readable } from "node:stream";
import { type BatchSessionInput, FleetApiError, type FleetClient } from "../producer/client.js";
import { apiClientOf, write } from "./api-client.js";
import { type BatchCommandOptions, guarded, ioOf } from "./batch.js";
import {
  type BatchFile,
  checkLines,
  LineError,
  numberedLines,
  openBatchFile,
  parseLine,
  startsNewPart,
} from "./batch-file.js";
import { type BatchIo, progress } from "./batch-progress.js";
import { sendPart } from "./batch-send.js";
import { waitForEnd } from "./batch-wait.js";
import { MAX_IDEMPOTENCY_KEY } from "./flag-values.js";
import { onInterrupt } from "./interrupt.js";

/** Sessions per request (the API's MAX_BATCH). */
export const PART_SIZE = 1_000;

export async function batchSubmitCommand(file: string, options: BatchSubmitOptions = {}): Promise<number> {
  const io = ioOf(options);
  // 429s go to sendPart at once, which says so on stderr: the client's own wait (30 s) kept
  // the command silent that long before "waiting for room".
  const { client, ...api } = apiClientOf(options, 0);
  return guarded(io, api, "fleet batch submit", async () => {
    const partSize = Math.min(PART_SIZE, options.partSize ?? PART_SIZE);
    // An empty prefix (an unset "$KEY") made the keys "-0", "-1", …, which every such command
    // of the tenant shares: a second one within 24 h with the same file got the first's batch
    // back and submitted nothing, exit 0.
    if (options.idempotencyKey === "")
      throw new LineError("--idempotency-key must not be empty (leave it out for a key of its own)");
    const keyPrefix = options.idempotencyKey ?? `fleet-batch-${randomUUID()}`;
    const source = await openBatchFile(file, options.stdin ?? process.stdin);
    try {
      return await submit(client, source, io, { ...options, partSize, keyPrefix });
    } finally {
      await source.done();
    }
  });
}

export type BatchSubmitOptions = BatchCommandOptions & {
  /** Read for FILE `-` (default process.stdin). */
  stdin?: Readable;
  wait?: boolean;
  /** A webhook URL for the batch. */
  webhook?: string;
  /** false (`--no-session-events`): its sessions get no event streams. */
  sessionEvents?: boolean;
  /** Prefix of the parts' Idempotency-Keys; the same prefix makes a re-run act once (24 h). */
  idempotencyKey?: string;
  /** Sessions per request (≤ 1,000). */
  partSize?: number;
};

/** The file checked whole, then sent in parts as one batch (the module's comment says how). */
async function submit(
  client: FleetClient,
  file: BatchFile,
  io: BatchIo,
  options: BatchSubmitOptions & { partSize: number; keyPrefix: string },
): Promise<number> {
  const { partSize, keyPrefix } = options;
  const total = await checkLines(file);
  if (total === 0) throw new LineError(`${file.name}: holds no sessions`);
  // Each part's key is PREFIX-N, N up to one part a session: a prefix that leaves no room for
  // the last N had its first parts sent, then a part refused and the batch cancelled.
  const longest = MAX_IDEMPOTENCY_KEY - `-${total - 1}`.length;
  if (keyPrefix.length > longest)
    throw new LineError(
      `--idempotency-key: for a file of ${total} sessions the prefix is at most ${longest} characters (each part's key is PREFIX-N, at most ${MAX_IDEMPOTENCY_KEY}); this one has ${keyPrefix.length}`,
    );
  let batchId: string | undefined;
  let part: { line: number; session: BatchSessionInput }[] = [];
  let partBytes = 0;
  let partMessages = 0;
  let parts = 0;
  let submitted = 0;
  /** Whether a part was sent and not yet answered; whether the last one was answered. */
  let sending = false;
  let closed = false;
  // Ctrl-C or SIGTERM between parts: before, the command ended on `submitted 1000/3000`, its
  // batch open for ever and the prefix that sends the rest never said.
  const forget = onInterrupt(() =>
    (batchId === undefined && !sending) || closed
      ? undefined
      : `fleet batch submit: stopped; ${interruptedLine(batchId, submitted, keyPrefix)}`,
  );
  const bar = await progress(io, "submitted", total);
  const flush = async (last: boolean) => {
    sending = true;
    const sessions = part.map((p) => p.session);
    const key = `${keyPrefix}-${parts}`;
    try {
      if (batchId === undefined) {
        const created = await sendPart(
          () =>
            client.createBatch(sessions, {
              idempotencyKey: key,
              open: !last,
              // An empty --webhook (an unset "$URL") is sent, and refused: dropped, the batch
              // was submitted without the webhook its user counted on, exit 0.
              ...(options.webhook !== undefined ? { webhook: { url: options.webhook } } : {}),
              ...(options.sessionEvents === false ? { sessionEvents: false } : {}),
            }),
          io,
        );
        batchId = created.id;
      } else {
        const id = batchId;
        await sendPart(() => client.appendToBatch(id, sessions, { idempotencyKey: key, close: last }), io);
      }
    } catch (error) {
      // Name the file's line for an error in one of this part's sessions.
      const index = error instanceof FleetApiError ? /^sessions\[(\d+)\]/.exec(error.field ?? "") : null;
      if (index) {
        const at = part[Number(index[1])]!.line;
        throw new LineError(`${file.name}:${at}: ${(error as FleetApiError).message}`);
      }
      throw error;
    }
    sending = false;
    closed = last;
    parts++;
    submitted += sessions.length;
    part = [];
    partBytes = 0;
    partMessages = 0;
    await bar.update(submitted, `(batch ${batchId})`);
  };
  try {
    for await (const { line, text } of numberedLines(file)) {
      const session = parseLine(file.name, line, text);
      const next = { bytes: Buffer.byteLength(text), messages: importedMessages(session) };
      const sent = { count: part.length, bytes: partBytes, messages: partMessages };
      if (startsNewPart(sent, next, partSize)) await flush(false);
      part.push({ line, session });
      partBytes += next.bytes;
      partMessages += next.messages;
    }
    if (part.length === 0 && batchId === undefined) throw new LineError(`${file.name}: holds no sessions`);
    if (part.length > 0 || batchId !== undefined) await flush(true);
  } catch (error) {
    forget();
    await bar.stop();
    // Parts were sent and the batch is open: it would never end (no webhook, no end for
    // --wait), while its sessions run. A part refused for what it holds (a named line, a
    // 4xx) would be refused again: the batch is cancelled, and the line says so. A part that
    // could not be sent (no answer, 5xx, limits not lifted in time) may go through later: the
    // batch is left open, and the line says how to send the rest (the parts' keys replay
    // what was sent) or cancel it.
    if (batchId !== undefined && parts > 0 && !(await closedBatch(client, batchId))) {
      const refused =
        error instanceof LineError ||
        (error instanceof FleetApiError &&
          error.status >= 400 &&
          error.status < 500 &&
          error.status !== 408 &&
          error.status !== 429);
      const cancelled =
        refused &&
        (await client.cancelBatch(batchId).then(
          () => true,
          () => false,
        ));
      await write(
        io.stderr,
        cancelled
          ? `batch ${batchId} cancelled with the ${submitted} sessions sent before this error: an open batch never ends\n`
          : refused
            ? `batch ${batchId} is left open with the ${submitted} sessions sent before this error, and never ends: \`fleet batch cancel ${batchId}\`\n`
            : `batch ${batchId} is open with the ${submitted} sessions sent before this error: run the same command with --idempotency-key ${keyPrefix} to send the rest (what was sent is not sent twice), or \`fleet batch cancel ${batchId}\`\n`,
      );
    }
    throw error;
  }
  forget();
  await bar.stop();
  if (!options.wait) {
    await write(io.stdout, `${batchId}\n`);
    return 0;
  }
  const batch = await waitForEnd(client, batchId!, io);
  await write(io.stdout, `${JSON.stringify(batch)}\n`);
  return 0;
}

/** What a submit stopped by a signal left: an open batch (or one being created), and how to go on. */
export function interruptedLine(batchId: string | undefined, submitted: number, keyPrefix: string): string {
  const rest = `run the same command with --idempotency-key ${keyPrefix} to send the rest (what was sent is not sent twice)`;
  return batchId === undefined
    ? `its first part was sent, unanswered, and may have created a batch: ${rest}`
    : `batch ${batchId} is open with the ${submitted} sessions sent, and never ends: ${rest}, or \`fleet batch cancel ${batchId}\``;
}

/** How many messages a line's session imports (the API refuses what is not an array). */
function importedMessages(session: BatchSessionInput): number {
  const { messages } = session as { messages?: unknown };
  return Array.isArray(messages) ? messages.length : 0;
}

/** Whether the batch is closed (its last part arrived); false when it cannot be read. */
async function closedBatch(client: FleetClient, id: string): Promise<boolean> {
  return client.getBatch(id).then(
    (batch) => !batch.open,
    () => false,
  );
}
