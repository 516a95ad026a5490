/**
 * `fleet session delete ID` and `fleet batch delete ID`: erase a session (or a batch with all
 * its sessions) through the HTTP API (`DELETE /v1/…`). Prints the API's answer as JSON; exit
 * 0 when deleted, 2 for an id that does not exist (or is another tenant's) or an API that
 * cannot be reached, 1 for a 5xx.
 */
import { FleetApiError } from "../producer/client.js";
import { type ApiOptions, apiClientOf, keyHint, unreachableLine } from "./api-client.js";

export type DeleteIo = { stdout: NodeJS.WritableStream; stderr: NodeJS.WritableStream };
export type DeleteOptions = ApiOptions & { io?: DeleteIo };

async function guarded(
  options: DeleteOptions,
  what: string,
  body: (client: ReturnType<typeof apiClientOf>["client"]) => Promise<unknown>,
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
    throw error;
  }
}

export function sessionDeleteCommand(id: string, options: DeleteOptions = {}): Promise<number> {
  return guarded(options, "fleet session delete", (client) => client.deleteSession(id));
}

export function batchDeleteCommand(id: string, options: DeleteOptions = {}): Promise<number> {
  return guarded(options, "fleet batch delete", (client) => client.deleteBatch(id));
}
