/**
 * How `FleetClient.batchResults` reads a batch's results: NDJSON, one line at a time as it
 * streams in. A read that breaks part-way (the API restarted, a proxy cut the connection)
 * goes on after the last session read (`?after=`), so every line comes once.
 */
import type { BatchResult } from "../shared/api-types.js";
import { type ApiTransport, sleep } from "./api-transport.js";
import { apiError, FleetApiError, FleetNetworkError, parseJson, quotedStart } from "./client-errors.js";
import { textLines } from "./text-lines.js";

/** How long reconnects that meet no API (or a 502/503/504) go on before the error is given back. */
const RESUME_FOR_MS = 30_000;

/** The results at `path` (GET), each line parsed; `signal` stops the request. */
export async function* batchResultLines(
  http: ApiTransport,
  path: string,
  signal: AbortSignal | undefined,
): AsyncGenerator<BatchResult> {
  // The first and the last session read: a read that broke goes on after the last.
  let first: string | undefined;
  let last: string | undefined;
  let failingSince: number | undefined;
  let delay = 250;
  for (;;) {
    const resuming = last !== undefined;
    let response: Response;
    try {
      response = await http.waitingOutLimits(async () => {
        const url = resuming ? `${path}?after=${encodeURIComponent(last as string)}` : path;
        const answer = await http.send("GET", url, { headers: http.headers(undefined, {}), signal });
        if (!answer.ok || !answer.body)
          throw apiError("GET", url, answer, parseJson(await http.text("GET", url, answer, signal)));
        return answer;
      }, signal);
    } catch (error) {
      if (!resuming || !passing(error, signal)) throw error;
      failingSince ??= Date.now();
      if (Date.now() - failingSince > RESUME_FOR_MS) throw error;
      await sleep(delay, signal);
      signal?.throwIfAborted();
      delay = Math.min(5_000, delay * 2);
      continue;
    }
    // An API of an earlier release ignores `after` and starts again at the first session:
    // its lines up to the last one read are passed over.
    let skipping = false;
    let firstLine = true;
    // A line that is not a result is said, not thrown as JSON.parse's SyntaxError.
    let number = 0;
    try {
      for await (const line of textLines(http.chunks("GET", path, response, signal))) {
        number++;
        if (!line.trim()) continue;
        const result = parseJson(line);
        if (result === null || typeof result !== "object" || Array.isArray(result))
          throw new FleetApiError(
            response.status,
            "invalid_response",
            `GET ${path}: line ${number} is not a JSON object: ${quotedStart(line)}`,
          );
        const { sessionId } = result as BatchResult;
        // No line of an answer to `after` is the first one read (nor any before the last).
        if (resuming && firstLine && sessionId === first) skipping = true;
        firstLine = false;
        if (skipping) {
          if (sessionId === last) skipping = false;
          continue;
        }
        first ??= sessionId;
        last = sessionId;
        failingSince = undefined;
        delay = 250;
        yield result as BatchResult;
      }
      if (skipping)
        throw new FleetApiError(
          response.status,
          "invalid_response",
          `GET ${path}: the read broke after session ${last} and the API's answer read again lacks it (deleted meanwhile?); read the results again`,
        );
      return;
    } catch (error) {
      // Broken part-way: go on after the last line read (a read broken before its first line
      // is said, as any first failure).
      if (!(error instanceof FleetNetworkError) || signal?.aborted || last === undefined) throw error;
      failingSince ??= Date.now();
      if (Date.now() - failingSince > RESUME_FOR_MS) throw error;
      await sleep(delay, signal);
      signal?.throwIfAborted();
      delay = Math.min(5_000, delay * 2);
    }
  }
}

/** A failure of a request to go on that an API restarting or a proxy before it gives. */
function passing(error: unknown, signal: AbortSignal | undefined): boolean {
  if (signal?.aborted) return false;
  if (error instanceof FleetNetworkError) return true;
  return error instanceof FleetApiError && [502, 503, 504].includes(error.status);
}
