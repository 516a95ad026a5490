/**
 * What a session page says of its live updates (live.ts): live from the event stream, polling,
 * connecting — and, when the stream failed or was refused, why and when it is asked for again.
 */
import type { LiveMode } from "./live";
import type { ReadRetry } from "./read-retry";
import { failureText, Shown } from "./ui";

const LABELS: Record<LiveMode, string> = {
  connecting: "connecting…",
  stream: "live (event stream)",
  polling: "live (polling every second)",
  stopped: "not live",
};

/** `retry`: the stream failed (connecting) or was refused with a wait asked (polling meanwhile). */
export function LiveStatus({ mode, retry }: { mode: LiveMode; retry: ReadRetry | null }) {
  const when = retry && (
    <>
      trying again in {Math.round(retry.inMs / 1000)} s (attempt {retry.attempt})
    </>
  );
  return (
    <span class={`live ${mode}`} data-live-mode={mode}>
      {mode === "connecting" && retry ? (
        <>
          not live: the event stream failed (<Shown text={failureText(retry.failure)} />
          ); {when}
        </>
      ) : mode === "polling" && retry ? (
        <>
          {LABELS.polling}: the event stream was refused (<Shown text={failureText(retry.failure)} />
          ); {when}
        </>
      ) : (
        LABELS[mode]
      )}
    </span>
  );
}
