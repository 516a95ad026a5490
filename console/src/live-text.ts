/**
 * The text a session page shows as streaming (pure): the model call streaming now, and only
 * that. How the events tell attempts apart (contracts §7): every model call that streams text
 * belongs to a run (`runId` on every MESSAGE_DELTA); a call retried within a run is retried only
 * before any output (call-model.ts), and one cut after output is committed as an `interrupted`
 * MESSAGE, its retry being a resume, a run of its own with its own RUN_STARTED. So a MESSAGE
 * ends a step's text, and RUN_STARTED and RUN_COMPLETED end a run's. The page added every delta
 * to what it showed until a MESSAGE or a RUN_COMPLETED, so a stream that starts again from a
 * run's RUN_STARTED (after a 410, which the page answers by reconnecting without an id) showed
 * that run's text twice, the second copy after the first ("Hello wHello world"), and a delta of
 * a run that had ended (a worker frozen past its lease, woken after the resume began) was added
 * to the resume's text.
 */

/** What of an event (contracts §7) the streaming text depends on. */
export type LiveEvent = { type: string; data: { runId?: unknown; text?: unknown; message?: unknown } };

export type LiveText = {
  /** The run whose text is shown (null: none yet, or the stream starts again). */
  runId: string | null;
  text: string;
  /** Runs whose RUN_COMPLETED was read (the latest few): their late deltas are not shown. */
  ended: readonly string[];
};

export const NO_LIVE_TEXT: LiveText = { runId: null, text: "", ended: [] };

/** How many ended runs are remembered: a late delta comes from a run that ended just before. */
const ENDED_KEPT = 16;

/**
 * What the page shows after `event`, or after `reset`: the stream starts again (a 410), so
 * whatever streamed is sent again from its run's RUN_STARTED or is gone.
 */
export function liveTextAfter(state: LiveText, event: LiveEvent | { type: "reset" }): LiveText {
  if (!("data" in event)) return { ...NO_LIVE_TEXT, ended: state.ended };
  const { data } = event;
  const runId = typeof data.runId === "string" ? data.runId : null;
  switch (event.type) {
    case "RUN_STARTED":
      return { runId, text: "", ended: state.ended };
    case "MESSAGE_DELTA": {
      if (typeof data.text !== "string" || data.text === "") return state;
      if (runId !== null && state.ended.includes(runId)) return state;
      if (runId !== state.runId) return { runId, text: data.text, ended: state.ended };
      return { ...state, text: state.text + data.text };
    }
    case "MESSAGE": {
      const message = data.message as { role?: unknown } | null | undefined;
      return message?.role === "assistant" && state.text !== "" ? { ...state, text: "" } : state;
    }
    case "RUN_COMPLETED": {
      const ended = runId === null || state.ended.includes(runId) ? state.ended : [...state.ended, runId];
      return {
        runId: state.runId,
        text: runId === null || runId === state.runId ? "" : state.text,
        ended: ended.slice(-ENDED_KEPT),
      };
    }
    default:
      return state;
  }
}
