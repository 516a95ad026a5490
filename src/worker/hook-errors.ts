/** How an extension hook's failure is logged (pure): hook-runner.ts. */

import { clippedError, MAX_ERROR_CHARS } from "../shared/failure-text.js";
import { scrubSecrets, secretValuesFromEnv } from "../shared/scrub-secrets.js";
import { thrownText } from "../shared/thrown-text.js";

/**
 * What a hook threw, as logged: its type, message, stack and `code`, the keys they quote
 * scrubbed (scrub-secrets.ts: a log line never carries one) and clipped like a provider's
 * error (a hook that quoted an 8 MB error page logged it twice, message and stack, at every
 * run). Not the error itself: pino logs every property of it, and an HTTP client's error
 * carries the request it sent, headers and all — a reporter's failed call logged its key.
 */
export function loggable(
  error: unknown,
  env: Readonly<Record<string, string | undefined>> = process.env,
): Record<string, unknown> {
  const secrets = secretValuesFromEnv(env);
  const text = scrubSecrets(thrownText(error), secrets);
  const isError = error instanceof Error;
  const stack = isError && typeof error.stack === "string" ? scrubSecrets(error.stack, secrets) : "";
  const name = isError ? error.name : typeof error;
  const code = isError ? (error as { code?: unknown }).code : undefined;
  // A stack starts with the message: clipped there, its frames kept.
  const head = `${name}: ${text}`;
  const frames =
    text.length <= MAX_ERROR_CHARS
      ? stack
      : stack.startsWith(head)
        ? `${name}: ${clippedError(text)}${stack.slice(head.length)}`
        : null;
  return {
    type: name,
    message: clippedError(text),
    ...(stack
      ? { stack: frames !== null && frames.length <= 4 * MAX_ERROR_CHARS ? frames : clippedError(stack) }
      : {}),
    ...(typeof code === "string" || typeof code === "number" ? { code } : {}),
  };
}
