/**
 * How long a `fleet` client command (`batch …`, `session …`, `watch`, `webhook-secret`) waits
 * for the API's answer to begin. An API that takes the connection and never answers — its
 * event loop stuck, a proxy or load balancer holding the request with nothing behind it — held
 * each request for undici's own headers timeout, 300 s: `fleet batch status ID` sat silent for
 * five minutes, and the commands that ask again (`session export`, `batch submit`) for 6 × 300 s.
 *
 * The bound is the command process's alone: its fetch goes through an Agent whose
 * `headersTimeout` is a minute (the client's `idleTimeoutMs` default for an event stream that
 * brings nothing), well past the longest an API takes to begin an answer (a batch's delete
 * works for at most 20 s before it answers). A program using FleetClient keeps its own fetch.
 */
import { createRequire } from "node:module";
import type { Agent, setGlobalDispatcher } from "undici";
import { FleetNetworkError } from "../producer/client-errors.js";

export const API_ANSWER_TIMEOUT_MS = 60_000;

let bounded = false;

/** Makes this process's fetch give up on an answer that has not begun in API_ANSWER_TIMEOUT_MS. */
export function boundApiAnswers(): void {
  if (bounded) return;
  bounded = true;
  // From undici's own files, as the worker's provider transport takes its Agent: the package's
  // index loads all of undici. Node's fetch is undici 6 too, and reads this global dispatcher.
  const require = createRequire(import.meta.url);
  const UndiciAgent = require("undici/lib/dispatcher/agent.js") as typeof Agent;
  const global = require("undici/lib/global.js") as { setGlobalDispatcher: typeof setGlobalDispatcher };
  global.setGlobalDispatcher(new UndiciAgent({ headersTimeout: API_ANSWER_TIMEOUT_MS }));
}

/** Whether `error` is a request whose answer did not begin in time (undici's headers timeout). */
export function isUnanswered(error: unknown): error is FleetNetworkError {
  return error instanceof FleetNetworkError && error.code === "UND_ERR_HEADERS_TIMEOUT";
}

/** The line a command ends with when its request got no answer in time; else null. */
export function unansweredLine(error: unknown, what: string): string | null {
  if (!isUnanswered(error)) return null;
  return `${what}: ${error.method} ${error.url}: no answer within ${API_ANSWER_TIMEOUT_MS / 1000} s, though the connection was taken (is the API stuck, or is this port a proxy's with no API behind it?)\n`;
}
