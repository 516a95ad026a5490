/**
 * `events()` without an `after`: the session's stream, followed on across a stream written
 * anew (Redis restarted or failed over without its data: its own reconnect, with the last id
 * it received, is answered 410). It reads the session's stream again from the run it was
 * following (`?run=`) and leaves out what it had yielded (stream-reread.ts), as `stream()`,
 * `batchEvents()` and `fleet watch` do; it rejected with that 410 ("reconnect without an id"),
 * though the caller had given no id and the session went on. Given an `after`, a 410 still
 * rejects: what the caller had before its id is not known here, and a re-read would yield it
 * again.
 */
import type { FleetEvent } from "../shared/api-events.js";
import type { ApiTransport } from "./api-transport.js";
import { FleetApiError, refusesParameter } from "./client-errors.js";
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
  /** The run of the last event yielded that names one (a re-read's old messages name older runs). */
  let run: string | undefined;
  /**
   * The run a read starts at (`?run=`): the caller's `run`, and a re-read's the one the reader
   * was in. Without it the API starts at the latest run's RUN_STARTED, or at the stream's end
   * when the stream has none — as one written anew in the middle of a run has, once its worker
   * wrote to it before the re-read connected: the re-read then began after the run's last
   * messages and its end, and waited for ever for what it had missed. From `?run=` whose
   * RUN_STARTED is not kept, the API starts at the first event kept.
   */
  let from = options.run;
  for (;;) {
    try {
      // failIfUnreachable is about the caller's first connection, not a re-read's.
      for await (const event of eventStream(
        http,
        from === undefined ? path : `${path}?run=${encodeURIComponent(from)}`,
        {
          ...options,
          after,
          failIfUnreachable: first && options.failIfUnreachable,
        },
      )) {
        if (event.id) after = event.id;
        if (!step.pass(event)) continue;
        if (typeof event.data.runId === "string") run = event.data.runId;
        yield event;
      }
      return;
    } catch (error) {
      // A re-read's `?run=` refused (an API from before it, or a run no longer there): from
      // the latest run, as before. The caller's own `run` is not replaced.
      if (
        !first &&
        from !== undefined &&
        after === undefined &&
        (refusesParameter(error, "run") || isNotFound(error))
      ) {
        from = undefined;
        continue;
      }
      if (after === undefined || !step.follow(error)) throw error;
      // From the run it was in, unless that run's end was yielded: then from the latest run
      // (what came after the end), as from its start it brought nothing new.
      from = run !== undefined && step.ended(run) ? undefined : run;
      after = undefined;
      first = false;
      // Told as any other reconnect after a failure is.
      options.onRetry?.(error);
    }
  }
}

function isNotFound(error: unknown): boolean {
  return error instanceof FleetApiError && error.status === 404;
}
