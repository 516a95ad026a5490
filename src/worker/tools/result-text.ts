/**
 * A tool call's result as the text its message stores (pure but for reading the worker's
 * environment for keys to scrub): what a tool returned, bounded, and what it threw, its keys
 * scrubbed. Used by execute-tool.ts.
 */
import { scrubSecrets, secretValuesFromEnv } from "../../shared/scrub-secrets.js";
import { NO_TEXT, textOf, thrownText } from "../../shared/thrown-text.js";
import { jsonWithin } from "./bounded-json.js";

/**
 * What a tool threw, as its failed result says it: the keys it quotes scrubbed (the values of the
 * worker's key variables, anything shaped like a key: scrub-secrets.ts), as a hook's error and a
 * provider's are. The result is stored in the session, which its tenant reads, and sent to the
 * model's provider; a tool's error quoting the URL it called (`?api_key=…`) or an upstream's
 * "invalid key …" echo carried the worker's key to both. A successful result is left as it is.
 * Within MAX_TOOL_RESULT_CHARS, with a note saying how long it was when cut.
 */
export function boundedErrorText(
  error: unknown,
  { prefix = "", env = process.env, scrub = scrubSecrets }: ErrorTextOptions = {},
): string {
  const text = prefix + thrownText(error);
  const secrets = secretValuesFromEnv(env);
  // Cut before scrubbing: a 100 MB message was scrubbed whole (~0.9 s of the worker's event loop)
  // and then cut. The margin holds every key that begins before the bound whole, so one that
  // straddles the cut is still replaced (a key by its shape needs only its start: scrub-secrets.ts).
  const margin = Math.max(SCRUB_MARGIN_CHARS, ...secrets.map((s) => s.length));
  if (text.length <= MAX_TOOL_RESULT_CHARS + margin) return bounded(scrub(text, secrets));
  return bounded(scrub(text.slice(0, MAX_TOOL_RESULT_CHARS + margin), secrets), text.length);
}

interface ErrorTextOptions {
  /** Text said before the error's (not an error's: it is scrubbed too, so give plain words). */
  prefix?: string;
  /** Where the worker's key variables are read (secretValuesFromEnv). */
  env?: Readonly<Record<string, string | undefined>>;
  /** The scrubber; a test passes one that records what it is given. */
  scrub?: (text: string, secrets: readonly string[]) => string;
}

/** More than any key's shape needs to be recognised (`"x-api-key": "` and a few characters). */
const SCRUB_MARGIN_CHARS = 10_000;

/**
 * The most of one tool result that is stored, as characters (as much as a new message may
 * hold). A tool that returns 100 MB would otherwise take that much of a worker's memory per
 * call, of Postgres per message and of Redis per event, and no model could read it anyway.
 */
export const MAX_TOOL_RESULT_CHARS = 1_000_000;

/** Where a cut `text` ends: at MAX_TOOL_RESULT_CHARS (or its end), never inside a surrogate pair. */
function keptEnd(text: string): number {
  const end = Math.min(MAX_TOOL_RESULT_CHARS, text.length);
  const last = text.charCodeAt(end - 1);
  return last >= 0xd800 && last <= 0xdbff ? end - 1 : end;
}

/**
 * `text`, cut to MAX_TOOL_RESULT_CHARS (never inside a surrogate pair) with a note saying so and
 * how long it was (`length`: of the text `text` was cut from, when it was cut already).
 */
export function bounded(text: string, length = text.length): string {
  if (text.length <= MAX_TOOL_RESULT_CHARS && length === text.length) return text;
  // Cut already and then made shorter (its keys replaced): all of it is kept, with the note.
  const end = keptEnd(text);
  return `${text.slice(0, end)}\n[truncated: the tool returned ${length.toLocaleString("en")} characters; the first ${end.toLocaleString("en")} are kept]`;
}

/**
 * A tool's result as the content its message stores: bytes (bytesOf) as the UTF-8 text they
 * hold, anything else as resultText, each within MAX_TOOL_RESULT_CHARS.
 */
export function resultContent(value: unknown): string {
  const bytes = bytesOf(value);
  return bytes ? bytesText(bytes) : resultText(value);
}

/** The first MAX_TOOL_RESULT_CHARS of an object's JSON (never ending inside a surrogate pair), with a note. */
function cutJson(text: string): string {
  const end = keptEnd(text);
  const max = MAX_TOOL_RESULT_CHARS.toLocaleString("en");
  return `${text.slice(0, end)}\n[truncated: the tool's result, as JSON, is longer than ${max} characters; the first ${end.toLocaleString("en")} are kept]`;
}

/**
 * `value` as bytes when it is a Uint8Array (a Buffer: `readFile(path)` without an encoding) or an
 * ArrayBuffer, else null. Through JSON.stringify a Buffer became `{"type":"Buffer","data":[…]}`,
 * about four characters a byte: the model read numbers, and 100 MB held the worker's event loop
 * ~30 s (its lease, every other run on it) and 1.5 GB of heap for a string that was then cut.
 */
function bytesOf(value: unknown): Uint8Array | null {
  try {
    if (value instanceof Uint8Array) return value;
    if (value instanceof ArrayBuffer) return new Uint8Array(value);
  } catch {
    // A proxy whose prototype cannot be read: no bytes; resultText says what it can of it.
  }
  return null;
}

/**
 * `bytes` as UTF-8 text (what is no UTF-8: U+FFFD), only the first MAX_TOOL_RESULT_CHARS of them
 * read (each gives at most one character), with a note saying how many there were.
 */
function bytesText(bytes: Uint8Array): string {
  if (bytes.length <= MAX_TOOL_RESULT_CHARS) return new TextDecoder().decode(bytes);
  // `stream`: a character cut at the bound is left out, not said as U+FFFD.
  const kept = new TextDecoder().decode(bytes.subarray(0, MAX_TOOL_RESULT_CHARS), { stream: true });
  return `${kept}\n[truncated: the tool returned ${bytes.length.toLocaleString("en")} bytes; the text of the first ${MAX_TOOL_RESULT_CHARS.toLocaleString("en")} is kept]`;
}

/**
 * A tool's result as the text a tool message holds: a user tool typed loosely (plain
 * JavaScript) may return a number, an object or nothing, and the stored message, its
 * MESSAGE event and the console must all see the same string. Nothing a tool returns
 * makes its append fail (contracts §12). Within MAX_TOOL_RESULT_CHARS, with a note when cut.
 */
export function resultText(value: unknown): string {
  if (typeof value === "string") return bounded(value);
  if (value === undefined || value === null) return "";
  if (typeof value === "object") {
    try {
      // Written only as far as it is kept (bounded-json.ts): a huge object is never stringified whole.
      const json = jsonWithin(value, MAX_TOOL_RESULT_CHARS);
      if (json === undefined) return bounded(textOf(value));
      return json.whole ? json.text : cutJson(json.text);
    } catch (error) {
      // A circular object, a BigInt inside, a toJSON that throws: its string form, when it has
      // one of its own; else why it cannot be shown (before: "[object Object]", which said nothing).
      // Not an array's: its string form joins every element, as long as the array is.
      const text = Array.isArray(value) ? NO_TEXT : textOf(value);
      if (text !== "[object Object]" && text !== NO_TEXT) return bounded(text);
      return `(the tool's result cannot be shown as text: ${thrownText(error).split("\n")[0]})`;
    }
  }
  return bounded(textOf(value));
}
