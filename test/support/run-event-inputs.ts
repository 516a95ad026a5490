/** Session events as a worker writes them, for tests of the event streams. */
import type { SessionEventInput } from "../../src/shared/events.js";

/** Run `runId`'s RUN_STARTED (a first run, asked for by the API). */
export const runStartedEvent = (runId: string): SessionEventInput => ({
  type: "RUN_STARTED",
  runId,
  kind: "run",
  resumeKind: null,
  trigger: "api",
});

/** The `n`th text delta of run `runId` (`t<n>`). */
export const deltaEvent = (runId: string, n: number): SessionEventInput => ({
  type: "MESSAGE_DELTA",
  runId,
  text: `t${n}`,
});
