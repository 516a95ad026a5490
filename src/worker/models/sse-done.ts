/**
 * Whether an OpenAI-compatible SSE body ended with its terminal `data: [DONE]` event.
 *
 * The SDK's stream iterator swallows `[DONE]` and ends the same way whether or not it came,
 * so a connection closed right after the `finish_reason` chunk would look like a whole
 * response. resume-semantics.md §6 says a stream that did not finish is `interrupted`; to
 * tell the two apart the body is passed through this watcher on its way to the SDK's parser.
 * The bytes are not changed or buffered; only the first bytes of each line are looked at. The
 * body ends with the chunk that completes the `[DONE]` line: the SDK reads on past `[DONE]` until the server
 * closes the body, so a server that left it open (a proxy holding the connection) held the
 * finished step until the idle limit cut it, stored `interrupted` (test/sse-done-open.test.ts).
 */

/** `data:` + optional space + `[DONE]`, as the SDK's SSE decoder reads a data line. */
const DONE_LINES = ["data: [DONE]", "data:[DONE]"];
const PREFIX_BYTES = 12;
const LF = 0x0a;
const CR = 0x0d;

export type DoneWatch = {
  /** The response to hand to the SDK's parser: same status, headers and bytes. */
  response: Response;
  /** True once a `data: [DONE]` line has passed through. */
  sawDone(): boolean;
};

export function watchForDone(response: Response): DoneWatch {
  let done = false;
  /** The first bytes of the current line (enough to recognise a `[DONE]` line). */
  let line: number[] = [];
  const endLine = () => {
    if (!done && line.length > 0) {
      const text = String.fromCharCode(...line);
      done = DONE_LINES.some((prefix) => text.startsWith(prefix));
    }
    line = [];
  };
  const watcher = new TransformStream<Uint8Array, Uint8Array>({
    transform(chunk, controller) {
      for (const byte of chunk) {
        if (byte === LF || byte === CR) endLine();
        else if (line.length < PREFIX_BYTES) line.push(byte);
        if (done) break;
      }
      controller.enqueue(chunk);
      // The response is whole: the body ends with this chunk for the SDK (which skips what
      // follows `[DONE]`), which would otherwise read on until the server closed it — for
      // ever, from one that leaves it open.
      if (done) controller.terminate();
    },
    flush() {
      endLine();
    },
  });
  const body = response.body ? response.body.pipeThrough(watcher) : null;
  return {
    response: new Response(body, {
      status: response.status,
      statusText: response.statusText,
      headers: response.headers,
    }),
    sawDone: () => done,
  };
}
