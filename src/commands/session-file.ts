/**
 * The file of `fleet session export` / `fleet session import`: JSON Lines, written and read a
 * line at a time, so a session of any length streams through in constant memory.
 *
 *   {"fleetSessionExport":1,"id":"…","agent":{…},"metadata":{…},"createdAt":"…","exportedAt":"…"}
 *   {"role":"user","content":"…","seq":1,"createdAt":"…"}            one line per message
 *   …                                                                  (contracts §1, seq 1, 2, 3, …)
 *   {"fleetSessionExportEnd":{"messages":12000,"spent":{"modelCalls":40,"tokens":91000}}}
 *
 * The last line says how many messages the file holds, so a file cut short (a disk that
 * filled, an export that was stopped) is refused instead of being imported as a shorter
 * history, and what the session had spent of its budget (export-spent.ts), which the import
 * keeps. Everything here is pure: the commands do the reading, writing and requests.
 */

import { checkBody, MAX_JSON_DEPTH, tooDeepAt } from "../producer/request-checks.js";
import { BODY_LIMIT, MAX_HISTORY_BYTES } from "../producer/request-limits.js";
import type { SessionJson } from "../shared/api-types.js";
import { ValidationError } from "../shared/errors.js";
import type { Spent } from "../shared/imported-spent.js";
import { formatPath, type ImportedMessage, type Message, parseImportedHistory } from "../shared/messages.js";
import { historyBytes } from "../shared/store/history-bytes.js";
import { importedTokens, MAX_IMPORTED_COST_USD, MAX_IMPORTED_TOKENS } from "../shared/usage.js";
import { fileSpent, spentToSend } from "./export-spent.js";
import { creationRoom, MAX_MESSAGE_BYTES, RequestCuts } from "./import-requests.js";

export const EXPORT_VERSION = 1;

export type ExportHeader = {
  fleetSessionExport: typeof EXPORT_VERSION;
  /** The exported session's id (informational: an import makes a new session). */
  id: string;
  agent: unknown;
  metadata: Record<string, unknown>;
  createdAt?: string;
  exportedAt: string;
  /** Present (false) when the session had no event stream; the imported one gets none either. */
  sessionEvents?: false;
};

export function headerLine(session: SessionJson, exportedAt: Date): string {
  const header: ExportHeader = {
    fleetSessionExport: EXPORT_VERSION,
    id: session.id,
    agent: session.agent,
    metadata: session.metadata,
    createdAt: session.createdAt,
    exportedAt: exportedAt.toISOString(),
    ...(session.sessionEvents === false ? { sessionEvents: false as const } : {}),
  };
  return `${JSON.stringify(header)}\n`;
}

/** `spent`: the session's `spent` as the API answered it with the last page (absent from an older API). */
export function endLine(messages: number, spent?: Spent): string {
  return `${JSON.stringify({ fleetSessionExportEnd: { messages, ...(spent ? { spent } : {}) } })}\n`;
}

/** The seq a page of an export must continue with, or why it cannot be written (a gap, a repeat). */
export function seqProblem(expected: number, seq: number): string | undefined {
  if (seq === expected) return undefined;
  return seq < expected
    ? `the API sent seq ${seq} again after seq ${expected - 1}`
    : `the API sent seq ${seq} after seq ${expected - 1}: seq ${expected} is missing`;
}

/** A line of the file that cannot be imported: `line` is 1-based. */
export class ExportFileError extends Error {
  override name = "ExportFileError";
  constructor(
    readonly line: number,
    message: string,
  ) {
    super(message);
  }
}

/** A message of the file as it is sent, with its size in a request body. */
export type FileMessage = { line: number; seq: number; message: ImportedMessage; bytes: number };

export type FileItem =
  | { kind: "header"; header: ExportHeader }
  /** `startsRequest`: the message is the first of a request after the one before (import-requests.ts). */
  | { kind: "message"; message: FileMessage; startsRequest: boolean }
  /** `spent`: what the import sends as `spentOutsideHistory` (export-spent.ts), if anything. */
  | { kind: "end"; spent?: Spent };

/**
 * Reads an export line by line (blank lines skipped by the caller) and says what each line
 * is, or throws an ExportFileError naming it: the first line the header, then messages
 * valid as the API validates an import (contracts §1, no call answered twice after one
 * step) whose seqs run 1, 2, 3, …, then the end line with their count, then nothing.
 */
export class ExportFileCheck {
  private state: "header" | "messages" | "ended" = "header";
  private count = 0;
  /** Results since the latest assistant message: call id → seq of its result. */
  private answered: Map<string, number> | undefined;
  /** The history's size as the API bounds an import's (MAX_HISTORY_BYTES), so far. */
  private historyBytes = 0;
  /** The steps' tokens so far, bounded in all as the API bounds a session's import (usage.ts). */
  private tokens = 0;
  /** The steps so far: a model call each (shared/imported-spent.ts). */
  private steps = 0;
  /** The requests the messages go in (import-requests.ts), from the header on. */
  private cuts = new RequestCuts(0);
  /** Whether the latest message starts a request, and the cost of its request's steps so far. */
  private request = { starts: false, costUsd: 0 };

  /** `extra`: the metadata the command merges over the file's (its creation's body holds it). */
  constructor(private readonly extra: Record<string, unknown> = {}) {}

  /** How many messages were read so far. */
  get messages(): number {
    return this.count;
  }

  read(line: number, text: string): FileItem {
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      throw new ExportFileError(line, "not valid JSON");
    }
    if (value === null || typeof value !== "object" || Array.isArray(value))
      throw new ExportFileError(line, "expected a JSON object");
    const record = value as Record<string, unknown>;
    // Refused as the API refuses it, before the parse and size checks below (recursive) overflow
    // the stack. A message gets every check of a request body, nested as a page nests it: what
    // passed here (nesting 2 levels short of the bound, 10,001 keys, `__proto__`, `1e400`) was
    // refused by the API after the first page, the session holding that page, or sent altered.
    if (this.state === "messages" && !("fleetSessionExportEnd" in record)) {
      try {
        checkBody(record, MESSAGE_DEPTH);
      } catch (error) {
        throw refusal(line, this.count + 1, error);
      }
    } else {
      const deep = tooDeepAt(value);
      if (deep !== undefined)
        throw new ExportFileError(
          line,
          `${formatPath("", deep)}: nests deeper than ${MAX_JSON_DEPTH} levels`,
        );
    }
    if (this.state === "ended")
      throw new ExportFileError(line, "follows the end line (fleetSessionExportEnd)");
    if (this.state === "header") {
      this.state = "messages";
      const header = parseHeader(line, record);
      this.cuts = new RequestCuts(creationRoom(header.agent, { ...header.metadata, ...this.extra }));
      return { kind: "header", header };
    }
    if ("fleetSessionExportEnd" in record) {
      const end = record.fleetSessionExportEnd as { messages?: unknown } | null;
      if (end?.messages !== this.count)
        throw new ExportFileError(
          line,
          `the end line says ${JSON.stringify(end?.messages)} messages, the file holds ${this.count}`,
        );
      const spent = fileSpent(end);
      if (typeof spent === "string") throw new ExportFileError(line, spent);
      this.state = "ended";
      const send = spentToSend(spent, { modelCalls: this.steps, tokens: this.tokens });
      return send ? { kind: "end", spent: send } : { kind: "end" };
    }
    const message = this.message(line, record);
    return { kind: "message", message, startsRequest: this.request.starts };
  }

  /** Throws unless the end line was read. */
  finish(lastLine: number): void {
    if (this.state === "header") throw new ExportFileError(lastLine, "the file is empty");
    if (this.state !== "ended")
      throw new ExportFileError(
        lastLine,
        `the file ends without its end line (fleetSessionExportEnd) after ${this.count} messages: the export was cut short`,
      );
  }

  /**
   * The usage the API refuses (usage.ts assertImportedUsage), found here: before, it refused
   * the page that passed it after the session held the file's first page.
   */
  private checkUsage(line: number, seq: number, message: ImportedMessage, bytes: number): void {
    const starts = this.cuts.add(bytes);
    this.request = { starts, costUsd: starts ? 0 : this.request.costUsd };
    if (message.role === "assistant") this.steps++;
    if (message.role !== "assistant" || !message.usage) return;
    this.tokens += importedTokens([message]);
    if (this.tokens > MAX_IMPORTED_TOKENS)
      throw new ExportFileError(
        line,
        `seq ${seq}: brings the steps' usage to about ${this.tokens.toPrecision(3)} tokens; an imported session's steps may report at most ${MAX_IMPORTED_TOKENS} in all`,
      );
    this.request.costUsd += message.usage.costUsd ?? 0;
    if (!(this.request.costUsd <= MAX_IMPORTED_COST_USD))
      throw new ExportFileError(
        line,
        `seq ${seq}: brings the usage.costUsd of the steps sent with it to about ${this.request.costUsd.toPrecision(3)} USD; one request may report at most ${MAX_IMPORTED_COST_USD} USD`,
      );
  }

  private message(line: number, record: Record<string, unknown>): FileMessage {
    const seq = this.count + 1;
    if (record.seq !== seq)
      throw new ExportFileError(
        line,
        record.seq === undefined
          ? `the message has no seq (expected ${seq})`
          : `seq ${JSON.stringify(record.seq)} where seq ${seq} was expected: messages must run 1, 2, 3, … with no gap or repeat`,
      );
    let message: ImportedMessage;
    try {
      [message] = parseImportedHistory([record], "m") as [ImportedMessage];
    } catch (error) {
      throw refusal(line, seq, error, /^m\[0\]\.?/);
    }
    if (message.role === "assistant") this.answered = new Map();
    if (message.role === "tool" && this.answered) {
      const first = this.answered.get(message.toolCallId);
      if (first !== undefined)
        throw new ExportFileError(
          line,
          `seq ${seq}: tool call "${message.toolCallId}" already has a result (seq ${first}) after the same assistant message; a call is answered at most once`,
        );
      this.answered.set(message.toolCallId, seq);
    }
    const bytes = Buffer.byteLength(JSON.stringify(message));
    if (bytes > MAX_MESSAGE_BYTES)
      throw new ExportFileError(
        line,
        `seq ${seq}: the message is ${(bytes / 1024 / 1024).toFixed(1)} MiB, more than one request may hold (${BODY_LIMIT / 1024 / 1024} MiB)`,
      );
    // The API refuses the page that passes it: found here, before a session holds most of the file.
    this.historyBytes += historyBytes([message]);
    if (this.historyBytes > MAX_HISTORY_BYTES)
      throw new ExportFileError(
        line,
        `seq ${seq}: brings the history to about ${mebibytes(this.historyBytes)} MiB; an imported session holds at most ${mebibytes(MAX_HISTORY_BYTES)} MiB (its texts, tool calls and provider state)`,
      );
    this.checkUsage(line, seq, message, bytes);
    this.count = seq;
    return { line, seq, message, bytes };
  }
}

/** How deep a message sits in the body of the request that sends it: `{"messages": [message]}`. */
const MESSAGE_DEPTH = 2;

/** A ValidationError of message `seq` as the file's error naming its line (the field named from the message). */
function refusal(line: number, seq: number, error: unknown, prefix = /^/): ExportFileError {
  if (!(error instanceof ValidationError)) throw error;
  const field = error.field.replace(prefix, "");
  const text = error.field ? error.message.slice(error.field.length + 2) : error.message;
  return new ExportFileError(line, `seq ${seq}: ${field ? `${field}: ` : ""}${text}`);
}

const mebibytes = (bytes: number) => (bytes / 1024 / 1024).toFixed(1).replace(/\.0$/, "");

function parseHeader(line: number, record: Record<string, unknown>): ExportHeader {
  if (record.fleetSessionExport !== EXPORT_VERSION)
    throw new ExportFileError(
      line,
      "fleetSessionExport" in record
        ? `export version ${JSON.stringify(record.fleetSessionExport)} is not one this fleet reads (${EXPORT_VERSION})`
        : "the first line is not the header of a `fleet session export` file ({fleetSessionExport: 1, agent, …})",
    );
  if (record.agent === null || typeof record.agent !== "object" || Array.isArray(record.agent))
    throw new ExportFileError(line, "the header's agent must be a JSON object");
  const metadata = record.metadata ?? {};
  if (metadata === null || typeof metadata !== "object" || Array.isArray(metadata))
    throw new ExportFileError(line, "the header's metadata must be a JSON object");
  return { ...(record as ExportHeader), metadata: metadata as Record<string, unknown> };
}

/**
 * Whether a stored message is the one the file holds at its seq: what a retried page
 * compares before it goes on after what is stored (never storing a message twice, and
 * never taking another writer's messages for its own). Compares what identifies a message;
 * stored-only fields (`usage: null` for none, `createdAt`) are left out.
 */
export function sameMessage(stored: Message, sent: Message): boolean {
  if (stored.role !== sent.role || stored.content !== sent.content) return false;
  if (stored.role === "assistant" && sent.role === "assistant") {
    const calls = (m: typeof stored) => JSON.stringify((m.toolCalls ?? []).map((c) => [c.id, c.name]));
    return stored.stopReason === sent.stopReason && calls(stored) === calls(sent);
  }
  if (stored.role === "tool" && sent.role === "tool")
    return (
      stored.toolCallId === sent.toolCallId && stored.name === sent.name && stored.success === sent.success
    );
  return true;
}
