/**
 * A `200` whose body is JSON, to a request that asked for an event stream (every provider
 * request streams: `stream: true`). The SDKs read such a body as an event stream with no
 * event, so the request "ended before any output", was sent again up to the attempt limit —
 * billed each time by a server that had answered — and the run's error said nothing of what
 * the server sent: a proxy's `{"error": {...}}` (a model it does not serve, a key it refuses),
 * or a whole answer from a server that does not stream. Used by transport.ts.
 *
 * - `{"error": {...}}` is judged like the same error sent inside a stream
 *   (`streamErrorRetryable`), its message kept;
 * - any other JSON is refused, not retried: the same server answers the same way again;
 * - a body that does not parse (a body cut short) is retried like a broken stream.
 */
import { ProviderError, type ProviderErrorInfo, streamErrorRetryable } from "./provider.js";

/** The most of such a body read: its error's message is all that is wanted. */
const MAX_JSON_ANSWER_BYTES = 64 * 1024;

/** Whether a 200 answer's content type says JSON rather than an event stream. */
export function isJsonAnswer(response: Response): boolean {
  if (response.status !== 200) return false;
  const type = response.headers.get("content-type")?.toLowerCase() ?? "";
  return /\bjson\b/.test(type) && !type.includes("event-stream");
}

/** The ProviderError a JSON 200 answer means (see the file comment); its body is read, at most MAX_JSON_ANSWER_BYTES. */
export async function jsonAnswerError(response: Response, info: ProviderErrorInfo): Promise<ProviderError> {
  const label = info.provider ?? "provider";
  const { text, whole } = await headOf(response);
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    // Cut short on its way (retried), or longer than is read: an answer, not an error.
    if (whole)
      return new ProviderError(
        `${label}: the response was a JSON body that does not parse`,
        true,
        undefined,
        info,
      );
  }
  const error = (body as { error?: unknown } | null)?.error;
  if (error !== null && typeof error === "object") {
    const { message, type, code, status } = error as Record<string, unknown>;
    const kind = [type, code].find((v): v is string => typeof v === "string");
    return new ProviderError(
      `${label}: HTTP 200 with an error body: ${typeof message === "string" ? message : JSON.stringify(error).slice(0, 500)}`,
      streamErrorRetryable({ status, code, type }),
      undefined,
      { ...info, status: 200, ...(kind === undefined ? {} : { type: kind }) },
    );
  }
  return new ProviderError(
    `${label}: the server answered with a whole JSON body, not the event stream the request asked for (stream: true); nothing of it is kept`,
    false,
    undefined,
    { ...info, status: 200 },
  );
}

/** The body's first MAX_JSON_ANSWER_BYTES as text (`whole`: all of it); the rest is not read. */
async function headOf(response: Response): Promise<{ text: string; whole: boolean }> {
  if (!response.body) return { text: "", whole: true };
  const reader = response.body.getReader();
  const parts: Uint8Array[] = [];
  let bytes = 0;
  let whole = false;
  try {
    while (bytes < MAX_JSON_ANSWER_BYTES) {
      const { done, value } = await reader.read();
      if (done) {
        whole = true;
        break;
      }
      parts.push(value);
      bytes += value.length;
    }
  } finally {
    await reader.cancel().catch(() => {});
  }
  return { text: Buffer.concat(parts).toString("utf8"), whole };
}
