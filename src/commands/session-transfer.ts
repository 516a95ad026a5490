/**
 * What `fleet session export` and `fleet session import` share around their requests: output
 * written with backpressure, a request asked again while the API is away, and errors turned
 * into one line on stderr and an exit code.
 */
import type { Writable } from "node:stream";
import { FleetApiError, FleetNetworkError } from "../producer/client.js";
import { refusedByFetch, runGuarded, unreachableLine, write } from "./api-client.js";
import { ExportFileError } from "./session-file.js";

export type TransferIo = { stdout: Writable; stderr: Writable };

export function ioOf(io: TransferIo | undefined): TransferIo {
  return io ?? { stdout: process.stdout, stderr: process.stderr };
}

export { write };

/** A failure the command explains itself: its line, and exit 2 (bad input) or 1. */
export class TransferError extends Error {
  override name = "TransferError";
  constructor(
    message: string,
    readonly exitCode: 1 | 2,
  ) {
    super(message);
  }
}

/** No answer, a 5xx, or a keyed request still being answered: worth asking again. */
export function passing(error: unknown): boolean {
  if (error instanceof FleetNetworkError) return !refusedByFetch(error);
  if (!(error instanceof FleetApiError)) return false;
  return error.status >= 500 || error.reason === "idempotency_key_in_use";
}

/** Attempts of one request before its error ends the command (about 8 s of waits in all). */
const ATTEMPTS = 6;

/**
 * `call`, again after an error that `passing` accepts (backoff 250 ms, doubling), saying so
 * on stderr. Only for calls that are safe to repeat: GETs, a POST with its Idempotency-Key,
 * a page of an import (stored only right after its `afterSeq`).
 */
export async function retrying<T>(
  io: TransferIo,
  what: string,
  call: () => Promise<T>,
  /** The command's first request: an API that is not there at all is said at once. */
  first = false,
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await call();
    } catch (error) {
      if (attempt >= ATTEMPTS || !passing(error)) throw error;
      if (first && unreachableLine(error, what, "") !== null) throw error;
      const why = error instanceof Error ? error.message : String(error);
      await write(io.stderr, `${what}: ${why}; trying again\n`);
      await new Promise((resolve) => setTimeout(resolve, 250 * 2 ** (attempt - 1)));
    }
  }
}

/** Runs a command body; a failure it knows ends it with one line on stderr and an exit code. */
export function guarded(
  io: TransferIo,
  api: { url: string; keySent: boolean },
  what: string,
  body: () => Promise<number>,
): Promise<number> {
  return runGuarded(io.stderr, api, what, body, (error) => {
    if (error instanceof TransferError) return { line: error.message, exitCode: error.exitCode };
    if (error instanceof ExportFileError)
      return { line: `line ${error.line}: ${error.message}`, exitCode: 2 };
    if (error instanceof FleetNetworkError) return { line: error.message, exitCode: 1 };
    return null;
  });
}
