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

export function apiClientOf(options: ApiOptions): { client: FleetClient; url: string } {
  const env = readProcessEnv();
  const url = options.api ?? env.FLEET_API_URL ?? `http://127.0.0.1:${env.PORT || 3000}`;
  return { client: new FleetClient({ baseUrl: url, apiKey: options.apiKey ?? env.FLEET_API_KEY }), url };
}

/** The line for an error that says nothing listens at `url` (else null). */
export function unreachableLine(error: unknown, what: string, url: string): string | null {
  const cause = (error as { cause?: { code?: string } } | null)?.cause;
  const code = cause?.code ?? (error as { code?: string } | null)?.code;
  if (code !== "ECONNREFUSED" && code !== "ENOTFOUND" && code !== "EAI_AGAIN") return null;
  return `${what}: cannot reach the API at ${url}; start it with \`fleet api\` or set FLEET_API_URL\n`;
}
