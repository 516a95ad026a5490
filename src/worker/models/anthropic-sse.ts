/**
 * A Messages API response body → its stream events (used by anthropic.ts), as the SDK's
 * `Stream.fromSSEResponse` reads them, but an event sent without its `event:` line is named
 * by its data's `type`.
 *
 * Proxies and gateways in front of Anthropic (and compatible servers) are known to forward
 * the `data:` lines and drop the `event:` lines. The SDK skips every unnamed event, so such a
 * stream read as empty ("ended before message_stop"): the step was asked again until the
 * attempts ran out, each answer generated, and billed, in full. An unnamed message whose data
 * is not a JSON object with a string `type` (`data: [DONE]` from a translating proxy) is
 * skipped, as the SDK skips it. Named events are read exactly as the SDK reads them: `ping`
 * skipped, `error` thrown as the SDK's APIError (judged by anthropic-errors.ts), the rest
 * parsed as JSON (a body that is not JSON throws).
 */
import { APIError } from "@anthropic-ai/sdk";
import type { RawMessageStreamEvent } from "@anthropic-ai/sdk/resources/messages";
import type { ErrorType } from "@anthropic-ai/sdk/resources/shared";
import { Stream } from "@anthropic-ai/sdk/streaming";

/** The event an SSE message is: its `event:` name, else its data's `type`; null when neither. */
export function eventOf(sse: { event: string | null; data: string }): { name: string; data: unknown } | null {
  if (sse.event !== null) return { name: sse.event, data: undefined };
  const data = parsed(sse.data);
  const type = (data as { type?: unknown } | undefined)?.type;
  return typeof type === "string" ? { name: type, data } : null;
}

/** The events of an event-stream `response` of the Messages API (see the file comment). */
export async function* anthropicEvents(response: Response): AsyncIterable<RawMessageStreamEvent> {
  try {
    for await (const sse of Stream.rawEvents(response)) {
      const event = eventOf(sse);
      if (event === null || event.name === "ping") continue;
      if (event.name === "error") {
        const body = (event.data ?? parsed(sse.data) ?? sse.data) as { error?: { type?: unknown } };
        // Whatever type the server names (the SDK passes it on unchecked too).
        const type = typeof body.error?.type === "string" ? (body.error.type as ErrorType) : undefined;
        throw new APIError(undefined, body, undefined, response.headers, type);
      }
      if (!sse.data) continue;
      yield (event.data ?? JSON.parse(sse.data)) as RawMessageStreamEvent;
    }
  } catch (error) {
    // As the SDK: an aborted request ends the stream (the reader then sees it cut, and aborted).
    if ((error as { name?: unknown } | null)?.name === "AbortError") return;
    throw error;
  }
}

/** `text` parsed as a JSON object, or undefined. */
function parsed(text: string): unknown {
  try {
    const value: unknown = JSON.parse(text);
    return typeof value === "object" && value !== null ? value : undefined;
  } catch {
    return undefined;
  }
}
