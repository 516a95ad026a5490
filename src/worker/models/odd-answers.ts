/**
 * Two answers to a streamed request that no retry can make right (used by transport.ts; a web
 * page and a JSON body have files of their own, page-answer.ts and json-answer.ts):
 *
 * - a `200` of another content type than an event stream (`text/plain`: a proxy's message, a
 *   server that does not stream). The SDKs read any body as an event stream: text with no
 *   event "ended before any output" and was sent again up to the attempt limit, text that
 *   held `data:` lines was taken as the model's answer. An answer with no content type at all
 *   is still read as a stream (a bare server may send none).
 * - response headers larger than the HTTP client reads (undici's `UND_ERR_HEADERS_OVERFLOW`,
 *   Node's --max-http-header-size, 16 KiB by default: a proxy adding huge cookies). The SDKs
 *   called it a connection error and asked again, getting the same headers each time.
 *
 * Both are refused after one request, not retried: the same server answers the same way.
 */
import { headBytes } from "./error-answer.js";
import { ProviderError, type ProviderErrorInfo } from "./provider.js";

/** The most of such a body read: enough to say what it is. */
const MAX_HEAD_BYTES = 1024;
/** The most of it quoted in the error. */
const MAX_QUOTED_CHARS = 200;

/** The content type of a 200 answer that says something other than an event stream, else null. */
export function notStreamType(response: Response): string | null {
  if (response.status !== 200) return null;
  const type = response.headers.get("content-type")?.trim() ?? "";
  if (type === "" || /^text\/event-stream\b/i.test(type)) return null;
  return type.split(";")[0]!.trim().slice(0, 100);
}

/** The ProviderError a 200 of `type` means, quoting the start of its body. */
export async function notStreamError(
  response: Response,
  type: string,
  info: ProviderErrorInfo,
): Promise<ProviderError> {
  const head = (await headOf(response)).replace(/\p{Cc}+/gu, " ").trim();
  const quoted = head.length > MAX_QUOTED_CHARS ? `${head.slice(0, MAX_QUOTED_CHARS)}…` : head;
  return new ProviderError(
    `${info.provider ?? "provider"}: the server answered 200 with ${type}, not the event stream the request asked for (text/event-stream)${quoted === "" ? "" : `: ${JSON.stringify(quoted)}`}`,
    false,
    undefined,
    { ...info, status: 200 },
  );
}

/** Whether `error` (what fetch threw) is undici refusing response headers past its size. */
export function isHeadersOverflow(error: unknown): boolean {
  for (let e = error, depth = 0; e !== null && typeof e === "object" && depth < 4; depth++) {
    if ((e as { code?: unknown }).code === "UND_ERR_HEADERS_OVERFLOW") return true;
    e = (e as { cause?: unknown }).cause;
  }
  return false;
}

export function headersOverflowError(info: ProviderErrorInfo): ProviderError {
  return new ProviderError(
    `${info.provider ?? "provider"}: the server's response headers are larger than the worker reads (Node's --max-http-header-size, 16 KiB by default); not retried, the same server sends the same headers`,
    false,
    undefined,
    info,
  );
}

/** The body's first MAX_HEAD_BYTES as text; the rest is not read. */
async function headOf(response: Response): Promise<string> {
  if (!response.body) return "";
  return (await headBytes(response.body, MAX_HEAD_BYTES)).toString("utf8").replace(/\uFFFD+$/, "");
}
