/** The parsers of the `fleet` program's flag and argument values: a bad one is a usage error naming the command. */
import { InvalidArgumentError } from "commander";

/** A parser for a whole-number flag from `min` to `max`. */
export function wholeNumber(min: number, max?: number): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (!/^\s*\d+\s*$/.test(value) || !Number.isSafeInteger(n) || n < min || (max !== undefined && n > max))
      throw new InvalidArgumentError(
        max === undefined
          ? `expected a whole number ≥ ${min}`
          : `expected a whole number from ${min} to ${max}`,
      );
    return n;
  };
}
/** `on` or `off`, refused as a usage error naming the command, as a bad number is. */
export function onOrOff(value: string): "on" | "off" {
  if (value !== "on" && value !== "off") throw new InvalidArgumentError("expected on or off");
  return value;
}
export const port = wholeNumber(0, 65_535);

/** The longest Idempotency-Key the API takes (idempotency-hooks.ts). */
export const MAX_IDEMPOTENCY_KEY = 255;

/**
 * `--idempotency-key` (or a batch's prefix of them) as it is sent: without surrounding blanks
 * (a key read from a file with its CRLF; fetch drops them too), and only what an
 * Idempotency-Key may hold, visible ASCII, at most MAX_IDEMPOTENCY_KEY characters. A line
 * break inside it or a character past Latin-1 was refused by fetch with its own words
 * (`Headers.append: … is an invalid header value`), exit 1. Empty is left to the command.
 */
export function idempotencyKey(value: string): string {
  const key = value.replace(/^[ \t\r\n]+|[ \t\r\n]+$/g, "");
  const bad = key.search(/[^\x21-\x7e]/);
  if (bad >= 0)
    throw new InvalidArgumentError(
      `an Idempotency-Key is visible ASCII characters; character ${bad + 1} is not (a space, a line break, a control or non-ASCII character)`,
    );
  if (key.length > MAX_IDEMPOTENCY_KEY)
    throw new InvalidArgumentError(`an Idempotency-Key is at most ${MAX_IDEMPOTENCY_KEY} characters`);
  return key;
}
/**
 * Worker processes `fleet up` and `fleet demo` start on this machine: each takes ~1 s of CPU and
 * ~100 MB to start, so `--workers 100000` (a typo, a script's wrong variable) forked until the
 * machine stalled (load average 119 on 2 cores). More than this is a fleet of hosts, run with
 * `fleet worker` under the operator's own supervisor.
 */
export const MAX_LOCAL_WORKERS = 64;
export const workerCount = wholeNumber(1, MAX_LOCAL_WORKERS);

/**
 * Sessions `fleet demo` runs: it submits them as one batch, and a batch holds at most 1,000
 * (the API's MAX_BATCH). More started the demo's fleet, then failed with the API's
 * `sessions: holds at most 1000 sessions` (exit 1), or a body over 16 MiB.
 */
export const MAX_DEMO_SESSIONS = 1_000;
export const demoSessions = wholeNumber(1, MAX_DEMO_SESSIONS);

export function collect(value: string, previous: string[] = []): string[] {
  return [...previous, value];
}
