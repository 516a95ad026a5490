/**
 * `fleet watch SESSION_ID`: a session's events (contracts §7) as they happen, one readable
 * line each, at the event's own time (`--json`: the raw events, one JSON object a line). It reconnects by itself with
 * the last event id (read again from the latest run when that place is gone: `followed`), and
 * runs until SIGINT/SIGTERM, or with `--once` until the next RUN_COMPLETED.
 */
import type { Writable } from "node:stream";
import { FleetApiError, type FleetClient, type FleetEvent } from "../producer/client.js";
import { refusesParameter } from "../producer/client-errors.js";
import { placeGone, rereadStep } from "../producer/stream-reread.js";
import { type ApiOptions, apiClientOf, keyHint, unreachableLine } from "./api-client.js";

export type WatchOptions = ApiOptions & {
  json?: boolean;
  after?: string;
  once?: boolean;
  /** Where lines go (tests); default stdout and stderr. */
  io?: { stdout: Writable; stderr: Writable };
  /** Stops the watch (tests); default SIGINT/SIGTERM. */
  signal?: AbortSignal;
};

/**
 * Text as a terminal may show it: control characters (C0, DEL, C1) as escapes — `\n`, `\r`,
 * `\t`, else `\u001b` — so text a model, a tool or a user wrote can neither send the terminal
 * an escape sequence nor start a line that looks like one of the watch's own.
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: these are what it escapes
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/g;
const NAMED: Record<string, string> = { "\n": "\\n", "\r": "\\r", "\t": "\\t" };
const visible = (text: unknown): string =>
  String(text).replace(CONTROL, (c) => NAMED[c] ?? `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);

const clip = (text: unknown, max = 400) => {
  const shown = visible(text);
  return shown.length > max ? `${shown.slice(0, max)}…` : shown;
};

/** One readable line (or a few) for an event. */
export function describeEvent(event: FleetEvent): string {
  const d = event.data;
  const v = visible;
  switch (event.type) {
    case "RUN_STARTED":
      return `▶ ${d.kind === "resume" ? `resume (${v(d.resumeKind ?? "?")})` : "run"} started by ${v(d.trigger)} [${v(d.runId)}]`;
    case "MESSAGE": {
      const m = d.message ?? {};
      const head = `#${v(m.seq)} ${v(m.role)}`;
      if (m.role === "assistant") {
        const calls = (m.toolCalls ?? []) as { name: string; arguments: unknown }[];
        const lines = [`${head} (${v(m.stopReason)}): ${clip(m.content ?? "")}`];
        for (const call of calls)
          lines.push(`    → ${v(call.name)} ${clip(JSON.stringify(call.arguments), 200)}`);
        return lines.join("\n");
      }
      if (m.role === "tool") return `${head} ${v(m.name)} ${m.success ? "✓" : "✗"}: ${clip(m.content ?? "")}`;
      return `${head}: ${clip(m.content ?? "")}`;
    }
    case "MESSAGE_DELTA":
      return `  … ${clip(d.text ?? "", 200)}`;
    case "TOOL_STARTED":
      return `⚙ ${v(d.name)} started (${v(d.toolCallId)})`;
    case "TOOL_FINISHED":
      return `⚙ ${v(d.name)} finished ${d.success ? "✓" : "✗"} (${v(d.toolCallId)})`;
    case "MODEL_STOPPED":
      return `! model stopped: ${v(d.stopReason)}`;
    case "RUN_COMPLETED":
      return `■ run ended: ${v(d.outcome)} [${v(d.runId)}]`;
    case "SESSION_PARKED":
      return `⏸ session parked: ${v(d.reason)}`;
    default:
      return `${v(event.type)} ${v(JSON.stringify(d))}`;
  }
}

/**
 * When an event happened, as the stream tells it (ISO 8601): a MESSAGE's commit time
 * (`message.createdAt`, also for a message written into the stream again later), a
 * RUN_COMPLETED's run end (`endedAt`, on an end a repair wrote late), else when the event
 * entered the stream (`at`); null when the API sends none (one older than `at`).
 */
export function eventTimeOf(event: FleetEvent): string | null {
  const d = event.data;
  const own: unknown =
    event.type === "MESSAGE" ? d.message?.createdAt : event.type === "RUN_COMPLETED" ? d.endedAt : undefined;
  return isoTime(own) ?? isoTime(d.at);
}

function isoTime(time: unknown): string | null {
  if (typeof time !== "string") return null;
  const ms = Date.parse(time);
  return Number.isNaN(ms) ? null : new Date(ms).toISOString();
}

/**
 * The time column of a readable line, in UTC: `HH:MM:SS.mmm` for an event of `now`'s day,
 * with its date before it for an older one (a backlog read the next day), and dashes when the
 * event's time is not known — never the time the line was printed.
 */
export function timeColumn(time: string | null, now: Date): string {
  if (time === null) return "--:--:--.---";
  const today = now.toISOString().slice(0, 10);
  return time.slice(0, 10) === today ? time.slice(11, 23) : `${time.slice(0, 10)} ${time.slice(11, 23)}`;
}

/** Why the stream reconnects, in a few words. */
function retryCause(reason: unknown): string {
  if (reason instanceof FleetApiError) return `the API answered ${reason.status} (${reason.code})`;
  const cause = (reason as { cause?: { code?: unknown } } | null)?.cause?.code;
  return typeof cause === "string" ? `the API is unreachable (${cause})` : "the connection to the API broke";
}

/**
 * The API's message, with the place it names in the user's terms: `--after` is sent as
 * Last-Event-ID, and the ids the client sends itself on a reconnect are the stream's own, so
 * a 400 naming it is about `--after`; a session without a stream names the `fleet` commands
 * for it, not the HTTP routes.
 */
function asFlag(error: FleetApiError, sessionId: string): string {
  // The API's 409 names its HTTP routes; on the command line, the commands that do the same.
  if (error.reason === "session_events_off")
    return (
      `session ${sessionId} has sessionEvents: false, so it has no event stream to follow; ` +
      `turn it on with \`fleet session events ${sessionId} on\` (its stored messages are in the stream at once), ` +
      `or read the session with \`fleet session export ${sessionId}\``
    );
  const field = error.field;
  if (error.status !== 400 || (field !== "Last-Event-ID" && field !== "after")) return error.message;
  return error.message.startsWith(`${field}:`)
    ? `--after${error.message.slice(field.length)}`
    : error.message;
}

/**
 * The session's events as the watch prints them: `client.events()`, which follows on across a
 * stream written anew (a 410 to its own reconnect: Redis restarted without its data) by reading
 * the session's stream again from the run it was in, what it yielded left out
 * (session-follow.ts). From `--after` (the user's own id) the client does not: a 410 for that id
 * stands (exit 2), and one for an id the watch received since reads on without an id here, from
 * the run it was printing, what was printed left out — rethrown if the re-read would skip
 * messages (a place trimmed away: they are not in the stream any more), as the client does.
 */
async function* followed(
  client: FleetClient,
  sessionId: string,
  from: string | undefined,
  signal: AbortSignal,
  onRetry: (reason: unknown) => void,
): AsyncGenerator<FleetEvent> {
  // No API there at all is a mistake to say at once; a drop later is reconnected.
  const options = { signal, failIfUnreachable: true, onRetry };
  if (from === undefined) {
    yield* client.events(sessionId, options);
    return;
  }
  const step = rereadStep();
  /** Whether an event came since `--after`, so that a 410 is for an id the watch received. */
  let own = false;
  /** The run of the last event printed that names one, where the re-read starts (`?run=`). */
  let run: string | undefined;
  try {
    for await (const event of client.events(sessionId, { ...options, after: from })) {
      if (event.id) own = true;
      if (typeof event.data.runId === "string") run = event.data.runId;
      step.note(event);
      yield event;
    }
    return;
  } catch (error) {
    if (!own || !step.follow(error)) throw error;
    onRetry(error);
  }
  // From that run: without an id the API starts at the latest run's RUN_STARTED, or at the
  // stream's end when a stream written anew mid-run holds none, after what the watch missed.
  // From the latest run where the API refuses `?run=` (the last release's) or lost the run.
  // Not from a run whose end was printed: nothing of it is new, what follows it is.
  const rereadRun = run !== undefined && step.ended(run) ? undefined : run;
  let read = false;
  try {
    for await (const event of client.events(sessionId, {
      ...options,
      failIfUnreachable: false,
      run: rereadRun,
    })) {
      read = true;
      if (step.pass(event)) yield event;
    }
    return;
  } catch (error) {
    const refused =
      refusesParameter(error, "run") || (error instanceof FleetApiError && error.status === 404);
    if (rereadRun === undefined || read || !refused) throw error;
  }
  for await (const event of client.events(sessionId, { ...options, failIfUnreachable: false })) {
    if (step.pass(event)) yield event;
  }
}

export async function watchCommand(sessionId: string, options: WatchOptions = {}): Promise<number> {
  const stdout = options.io?.stdout ?? process.stdout;
  const stderr = options.io?.stderr ?? process.stderr;
  // An unset "$LAST_ID" in a script: taken for no --after, it started at the latest run and
  // skipped in silence what came before it.
  if (options.after === "") {
    stderr.write(
      "fleet watch: --after: must be an event id as the stream sent it (e.g. 1700000000000-0), not empty; leave it out to start at the session's latest run\n",
    );
    return 2;
  }
  const { client, url, keySent } = apiClientOf(options);
  const controller = new AbortController();
  const stop = () => controller.abort();
  options.signal?.addEventListener("abort", stop, { once: true });
  if (!options.signal) {
    process.once("SIGINT", stop);
    process.once("SIGTERM", stop);
  }
  let lastRetry = "";
  // Said on stderr, once per cause in a row: a script sees why nothing comes.
  const onRetry = (reason: unknown) => {
    const line = placeGone(reason)
      ? "fleet watch: the stream was written anew (410: Redis lost its data?); read again from the session's latest run, what was printed left out\n"
      : `fleet watch: ${retryCause(reason)}; reconnecting\n`;
    if (line !== lastRetry) stderr.write(line);
    lastRetry = line;
  };
  try {
    for await (const event of followed(client, sessionId, options.after, controller.signal, onRetry)) {
      lastRetry = "";
      if (options.json)
        stdout.write(`${JSON.stringify({ id: event.id, type: event.type, data: event.data })}\n`);
      else stdout.write(`${timeColumn(eventTimeOf(event), new Date())} ${describeEvent(event)}\n`);
      if (options.once && event.type === "RUN_COMPLETED") break;
    }
    return 0;
  } catch (error) {
    if (error instanceof FleetApiError) {
      const reason = error.reason ? ` (${error.reason})` : "";
      stderr.write(`fleet watch: ${asFlag(error, sessionId)}${reason}${keyHint(error.status, keySent)}\n`);
      return error.status >= 400 && error.status < 500 ? 2 : 1;
    }
    const line = unreachableLine(error, "fleet watch", url);
    if (line) {
      stderr.write(line);
      return 2;
    }
    throw error;
  } finally {
    process.off("SIGINT", stop);
    process.off("SIGTERM", stop);
  }
}
