/**
 * A `200` web page (`text/html`) to a request that asked for an event stream: what a base URL
 * that names a site rather than its API gets (a console's address, an OpenAI-compatible
 * server's root without its `/v1`: many sites answer any path with their page). The SDKs read
 * it as an event stream with no event, so the request "ended before any output", was sent
 * again up to the attempt limit, and the run's error said nothing of why. It is refused at
 * once, not retried (the same URL answers the same page), saying what came and what to check.
 * No model API streams as `text/html`. Used by transport.ts.
 */
import { ProviderError, type ProviderErrorInfo } from "./provider.js";

/** Whether a 200 answer's content type says a web page. */
export function isPageAnswer(response: Response): boolean {
  if (response.status !== 200) return false;
  const type = response.headers.get("content-type")?.toLowerCase() ?? "";
  return /^\s*(text\/html|application\/xhtml\+xml)\b/.test(type);
}

/** The ProviderError a web page answer means; its body is not read. */
export async function pageAnswerError(response: Response, info: ProviderErrorInfo): Promise<ProviderError> {
  await response.body?.cancel().catch(() => {});
  const where =
    info.provider === "anthropic"
      ? "the API's root, without /v1: the client adds /v1/messages"
      : "the API's, usually ending in /v1";
  return new ProviderError(
    `${info.provider ?? "provider"}: the server answered with a web page (text/html), not the event stream the request asked for: check that the model's baseUrl is ${where}`,
    false,
    undefined,
    { ...info, status: 200 },
  );
}
