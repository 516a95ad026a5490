/**
 * The HTTP API as the client commands (`fleet batch …`, `fleet watch`) reach it: the URL and
 * key from the options, else the environment with the working directory's `.env` (as every
 * role reads it), the one line a command ends with when no API answers there, and a command of
 * one call that prints its answer (`printAnswer`), and the error handling of a longer command
 * (`runGuarded`).
 */
import type { Writable } from "node:stream";
import { FleetApiError, FleetClient, FleetNetworkError } from "../producer/client.js";
import { readProcessEnv } from "../shared/config.js";
import { ValidationError } from "../shared/errors.js";
import { boundApiAnswers, unansweredLine } from "./answer-timeout.js";

export type ApiOptions = {
  /** The API's base URL; default FLEET_API_URL, else http://127.0.0.1:$PORT (3000). */
  api?: string;
  /** Default FLEET_API_KEY. */
  apiKey?: string;
};

export function apiClientOf(
  options: ApiOptions,
  /**
   * How long the client itself waits out 429s (FleetClient's `maxLimitWaitMs`); 0 for a
   * command that waits them out itself and says so.
   */
  maxLimitWaitMs?: number,
): { client: FleetClient; url: string; keySent: boolean } {
  boundApiAnswers();
  const env = readProcessEnv();
  const url = options.api ?? env.FLEET_API_URL ?? localApiUrl(env.PORT);
  const apiKey = options.apiKey ?? env.FLEET_API_KEY;
  let client: FleetClient;
  try {
    client = new FleetClient({
      baseUrl: url,
      apiKey,
      ...(maxLimitWaitMs === undefined ? {} : { maxLimitWaitMs }),
    });
  } catch (error) {
    // Bad input, named where the user gave it: one line and exit 2, not a call that fails later.
    if (!(error instanceof TypeError)) throw error;
    if (error.message.startsWith("FleetClient: apiKey "))
      throw new ValidationError(
        options.apiKey !== undefined ? "apiKey" : "FLEET_API_KEY",
        error.message.replace(/^FleetClient: apiKey /, ""),
      );
    const source =
      options.api !== undefined ? "--api" : env.FLEET_API_URL !== undefined ? "FLEET_API_URL" : "PORT";
    throw new ValidationError(source, error.message.replace(/^FleetClient: baseUrl /, ""));
  }
  return { client, url, keySent: Boolean(apiKey) };
}

/**
 * The API on this machine, http://127.0.0.1:$PORT (3000 when PORT is unset or empty), for a
 * command given neither --api nor FLEET_API_URL; a PORT that is no port is named as such.
 * Before, it became part of a URL, and the line said PORT must be an http:// URL, quoting a
 * URL the user never wrote.
 */
export function localApiUrl(port: string | undefined): string {
  const value = port || "3000";
  if (!/^\d{1,5}$/.test(value) || Number(value) > 65_535)
    throw new ValidationError(
      "PORT",
      `expected a port from 0 to 65535 (the API is reached at http://127.0.0.1:$PORT when neither --api nor FLEET_API_URL is set); got ${JSON.stringify(value)}`,
    );
  return `http://127.0.0.1:${value}`;
}

/**
 * What a command adds to a 401's line: the API's message tells an HTTP caller to send a
 * header, which a user of a `fleet` command does not do; the command sends FLEET_API_KEY.
 */
export function keyHint(status: number, keySent: boolean): string {
  if (status !== 401) return "";
  return keySent
    ? "; FLEET_API_KEY is not a key this API accepts (revoked, or of another fleet)"
    : "; set FLEET_API_KEY to a key (`fleet keys create --tenant NAME` prints one)";
}

/**
 * A request `fetch` refused itself before anything was sent: it names no system or socket
 * error (`bad port`: a port fetch never connects to, e.g. `--api http://127.0.0.1:1`). Asked
 * again, it is refused again.
 */
export function refusedByFetch(error: unknown): error is FleetNetworkError {
  return error instanceof FleetNetworkError && error.code === undefined && !error.reading;
}

/**
 * The line for an error that says nothing listens at `url`, or that fetch refuses the URL
 * itself (bad input, exit 2 as the other: before, every command but `fleet session export` and
 * `import` ended `fleet: … failed: bad port`, exit 1); else null.
 */
export function unreachableLine(error: unknown, what: string, url: string): string | null {
  if (refusedByFetch(error))
    return `${what}: ${error.message} (fetch sends nothing to this URL: check --api or FLEET_API_URL)\n`;
  const cause = (error as { cause?: { code?: string } } | null)?.cause;
  const code = cause?.code ?? (error as { code?: string } | null)?.code;
  if (code !== "ECONNREFUSED" && code !== "ENOTFOUND" && code !== "EAI_AGAIN") return null;
  return `${what}: cannot reach the API at ${url}; start it with \`fleet api\` or set FLEET_API_URL\n`;
}

export type AnswerIo = { stdout: NodeJS.WritableStream; stderr: NodeJS.WritableStream };
export type AnswerOptions = ApiOptions & { io?: AnswerIo };

/**
 * One API call of a command (`what`, e.g. `fleet session delete`): prints its answer as JSON
 * and exits 0; 2 for a 4xx (an id that does not exist, bad input) or an API that cannot be
 * reached, 1 for a 5xx, each with the API's message on stderr.
 */
export async function printAnswer(
  options: AnswerOptions,
  what: string,
  body: (client: FleetClient) => Promise<unknown>,
): Promise<number> {
  const io = options.io ?? { stdout: process.stdout, stderr: process.stderr };
  const { client, url, keySent } = apiClientOf(options);
  try {
    io.stdout.write(`${JSON.stringify(await body(client), null, 2)}\n`);
    return 0;
  } catch (error) {
    if (error instanceof FleetApiError) {
      io.stderr.write(`${what}: ${error.message}${keyHint(error.status, keySent)}\n`);
      return error.status >= 400 && error.status < 500 ? 2 : 1;
    }
    const line = unreachableLine(error, what, url);
    if (line) {
      io.stderr.write(line);
      return 2;
    }
    const unanswered = unansweredLine(error, what);
    if (unanswered) {
      io.stderr.write(unanswered);
      return 1;
    }
    throw error;
  }
}

/** Writes with backpressure: waits for `drain` when the stream's buffer is full. */
export async function write(stream: Writable, text: string): Promise<void> {
  if (!stream.write(text)) await new Promise<void>((resolve) => stream.once("drain", () => resolve()));
}

/** A command's own failure as its line on stderr and its exit code; null: not one of its own. */
export type ExplainError = (error: unknown) => { line: string; exitCode: number } | null;

/**
 * Runs a command body; a failure it knows ends it with one line on stderr and an exit code:
 * an API error (2 for a 4xx, 1 for a 5xx), an API that cannot be reached (2), then what
 * `explain` knows (the command's own errors). Anything else is thrown.
 */
export async function runGuarded(
  stderr: Writable,
  api: { url: string; keySent: boolean },
  what: string,
  body: () => Promise<number>,
  explain: ExplainError,
): Promise<number> {
  try {
    return await body();
  } catch (error) {
    if (error instanceof FleetApiError) {
      const field = error.field ? ` (${error.field})` : "";
      await write(stderr, `${what}: ${error.message}${field}${keyHint(error.status, api.keySent)}\n`);
      return error.status >= 400 && error.status < 500 ? 2 : 1;
    }
    const line = unreachableLine(error, what, api.url);
    if (line) {
      await write(stderr, line);
      return 2;
    }
    const known = explain(error);
    if (!known) {
      const unanswered = unansweredLine(error, what);
      if (!unanswered) throw error;
      await write(stderr, unanswered);
      return 1;
    }
    await write(stderr, `${what}: ${known.line}\n`);
    return known.exitCode;
  }
}
