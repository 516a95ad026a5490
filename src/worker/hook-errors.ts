/** How an extension hook's failure is logged (pure): hook-runner.ts. */

import { clippedError, MAX_ERROR_CHARS } from "../shared/failure-text.js";
import { thrownText } from "../shared/thrown-text.js";

/**
 * What a hook threw, as logged: itself, or with its message and stack clipped like a
 * provider's error (a hook that quoted an 8 MB error page logged it twice, message and stack,
 * at every run).
 */
export function loggable(error: unknown): unknown {
  const text = thrownText(error);
  if (text.length <= MAX_ERROR_CHARS) return error;
  const stack = error instanceof Error && typeof error.stack === "string" ? error.stack : "";
  const name = error instanceof Error ? error.name : typeof error;
  // A stack starts with the message: clipped there, its frames kept.
  const head = `${name}: ${text}`;
  const frames = stack.startsWith(head) ? `${name}: ${clippedError(text)}${stack.slice(head.length)}` : null;
  return {
    type: name,
    message: clippedError(text),
    ...(stack
      ? { stack: frames !== null && frames.length <= 4 * MAX_ERROR_CHARS ? frames : clippedError(stack) }
      : {}),
  };
}
