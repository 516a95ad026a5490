/** How `FleetClient.batchResults` reads a batch's results: NDJSON, one line at a time as it streams in. */
import type { BatchResult } from "../shared/api-types.js";
import type { ApiTransport } from "./api-transport.js";
import { apiError, FleetApiError, parseJson, quotedStart } from "./client-errors.js";
import { textLines } from "./text-lines.js";

/** The results at `path` (GET), each line parsed; `signal` stops the request. */
export async function* batchResultLines(
  http: ApiTransport,
  path: string,
  signal: AbortSignal | undefined,
): AsyncGenerator<BatchResult> {
  const response = await http.waitingOutLimits(async () => {
    const answer = await http.send("GET", path, { headers: http.headers(undefined, {}), signal });
    if (!answer.ok || !answer.body)
      throw apiError("GET", path, answer, parseJson(await http.text("GET", path, answer, signal)));
    return answer;
  }, signal);
  // A line that is not a result is said, not thrown as JSON.parse's SyntaxError.
  let number = 0;
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
    yield result as BatchResult;
  }
}
