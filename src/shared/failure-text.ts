/**
 * The text an error is kept as where others read it (pure): a run's `error`, a log line, a
 * failed job's `failedReason` in Redis. Its message alone (no stack), the secrets it quotes
 * scrubbed, clipped.
 */
import { scrubSecrets, secretValuesFromEnv } from "./scrub-secrets.js";
import { thrownText } from "./thrown-text.js";

/**
 * The most of an error message kept. The providers' SDKs quote the answer's body whole: an
 * error page of 8 MB (a proxy's, a server's dump) became an 8 MB run error, log line and
 * `provider_rejected: …` parked reason, at every attempt.
 */
export const MAX_ERROR_CHARS = 2_000;

/** `text` cut at MAX_ERROR_CHARS (never inside a surrogate pair), saying how long it was. */
export function clippedError(text: string): string {
  if (text.length <= MAX_ERROR_CHARS) return text;
  const high = text.charCodeAt(MAX_ERROR_CHARS - 1);
  const end = high >= 0xd800 && high <= 0xdbff ? MAX_ERROR_CHARS - 1 : MAX_ERROR_CHARS;
  return `${text.slice(0, end)}… (${text.length} characters in all)`;
}

/**
 * The text a run's `error` gets for the fault its job failed on: its message alone (no
 * stack), secrets scrubbed as a provider's error is, clipped like one.
 */
export function jobFailureText(error: unknown, env: Readonly<Record<string, string | undefined>>): string {
  const message = thrownText(error).trim();
  const text = message !== "" ? message : (nameOf(error) ?? "(no message)");
  return clippedError(scrubSecrets(text, secretValuesFromEnv(env)));
}

/** An Error's name, or undefined (for anything else, and a value that cannot be read: never throws). */
function nameOf(error: unknown): string | undefined {
  try {
    return error instanceof Error && typeof error.name === "string" ? error.name : undefined;
  } catch {
    return undefined;
  }
}
