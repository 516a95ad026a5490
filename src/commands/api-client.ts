/**
 * The HTTP API as the client commands (`fleet batch …`, `fleet watch`) reach it: the URL and
 * key from the options, else the environment with the working directory's `.env` (as every
 * role reads it), and the one line a command ends with when no API answers there.
 */
import { FleetClient } from "../producer/client.js";
import { readProcessEnv } from "../shared/config.js";

export type ApiOptions = {
  /** The API's base URL; default FLEET_API_URL, else http://127.0.0.1:$PORT (3000). */
  api?: string;
  /** Default FLEET_API_KEY. */
  apiKey?: string;
};

export function apiClientOf(options: ApiOptions): { client: FleetClient; url: string; keySent: boolean } {
  const env = readProcessEnv();
  const url = options.api ?? env.FLEET_API_URL ?? `http://127.0.0.1:${env.PORT || 3000}`;
  const apiKey = options.apiKey ?? env.FLEET_API_KEY;
  return { client: new FleetClient({ baseUrl: url, apiKey }), url, keySent: Boolean(apiKey) };
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

/** The line for an error that says nothing listens at `url` (else null). */
export function unreachableLine(error: unknown, what: string, url: string): string | null {
  const cause = (error as { cause?: { code?: string } } | null)?.cause;
  const code = cause?.code ?? (error as { code?: string } | null)?.code;
  if (code !== "ECONNREFUSED" && code !== "ENOTFOUND" && code !== "EAI_AGAIN") return null;
  return `${what}: cannot reach the API at ${url}; start it with \`fleet api\` or set FLEET_API_URL\n`;
}
