/**
 * `events()` without an `after`: the session's stream, followed on across a stream written
 * anew (Redis restarted or failed over without its data: its own reconnect, with the last id
 * it received, is answered 410). It reads the session's stream again from its latest run and
 * leaves out what it had yielded (stream-reread.ts), as `stream()`, `batchEvents()` and
 * `fleet watch` do; it rejected with that 410 ("reconnect without an id"), though the caller
 * had given no id and the session went on. Given an `after`, a 410 still rejects: what the
 * caller had before its id is not known here, and a re-read would yield it again.
 */
import type { FleetEvent } from "../shared/api-events.js";
import type { ApiTransport } from "./api-transport.js";
import { eventStream } from "./client-event-streams.js";
import type { EventsOptions } from "./client-options.js";
import { rereadStep } from "./stream-reread.js";

export async function* sessionEvents(
  http: ApiTransport,
  path: string,
  options: EventsOptions,
): AsyncGenerator<FleetEvent> {
  if (options.after !== undefined) {
    yield* eventStream(http, path, options);
    return;
  }
  let after: string | undefined;
  let first = true;
  // A 410 followed is rejected with on a gap: a reader so slow that its place was trimmed
  // away, whose missed messages are in no stream any more.
  const step = rereadStep();
  for (;;) {
    try {
      // failIfUnreachable is about the caller's first connection, not a re-read's.
      for await (const event of eventStream(http, path, {
        ...options,
        after,
        failIfUnreachable: first && options.failIfUnreachable,
      })) {
        if (event.id) after = event.id;
        if (step.pass(event)) yield event;
      }
      return;
    } catch (error) {
      if (after === undefined || !step.follow(error)) throw error;
      after = undefined;
      first = false;
      // Told as any other reconnect after a failure is.
      options.onRetry?.(error);
    }
  }
}
