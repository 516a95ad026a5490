/**
 * A Messages API event stream as the tests of the Anthropic reader write it: each event with
 * its `event:` line (as the API sends it) or as a `data:` line only, the `message_start` that
 * opens it and the `message_delta` + `message_stop` that end it.
 */
type Event = Record<string, unknown>;

/** Each event with its `event:` line. */
export const namedSse = (events: Event[]) =>
  events.map((event) => `event: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`).join("");

/** Each event as a `data:` line only. */
export const dataOnlySse = (events: Event[]) =>
  events.map((event) => `data: ${JSON.stringify(event)}\n\n`).join("");

export const messageStart = {
  type: "message_start",
  message: {
    id: "msg_1",
    type: "message",
    role: "assistant",
    model: "claude-test",
    content: [],
    stop_reason: null,
    usage: { input_tokens: 10, output_tokens: 1 },
  },
};

/** The stream's end, stopped for `stopReason` with `outputTokens` used. */
export const messageEnd = (stopReason: string, outputTokens: number): Event[] => [
  { type: "message_delta", delta: { stop_reason: stopReason }, usage: { output_tokens: outputTokens } },
  { type: "message_stop" },
];
