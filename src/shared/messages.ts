/**
 * The message model of contracts.md §1, with runtime validation whose errors name the
 * offending message index and field (`messages[2].stopReason: ...`). It re-exports the field a
 * 400 names (field-errors.ts) and what text can be stored (storable-text.ts), which were here.
 */
import { z } from "zod";
import { ValidationError } from "./errors.js";
import { mapInSlices } from "./event-loop-slices.js";
import { toValidationError } from "./field-errors.js";
import { assertStorable } from "./storable-text.js";

export { childPath, formatPath, toValidationError } from "./field-errors.js";
export {
  assertStorable,
  isStorableText,
  replaceUnstorable,
  replaceUnstorableJson,
  UNSTORABLE_TEXT,
  unstorableAt,
  unstorableField,
} from "./storable-text.js";

const nonEmpty = z.string().min(1, "must be a non-empty string");

export const toolCallSchema = z.strictObject({
  id: nonEmpty,
  name: nonEmpty,
  arguments: z.record(z.string(), z.unknown()),
});

/** Fields a stored message carries when read back; accepted on import (`seq` ignored, `createdAt` kept when valid: ImportedMessage). */
const storedFields = { seq: z.number().int().positive().optional(), createdAt: z.string().optional() };

const tokenCount = z.number().int().nonnegative();

/**
 * Token usage of a model step (contracts §13). `inputTokens` counts every input token,
 * cached ones included; `cacheReadTokens` / `cacheWriteTokens` say how many of them were read
 * from / written to the provider's prompt cache, and `reasoningTokens` how many of
 * `outputTokens` were reasoning — each present only where the provider reports it.
 * `costUsd`: what the step cost by the fleet's price table (FLEET_PRICES, prices.ts), present
 * only when the model has a price.
 */
export const usageSchema = z.strictObject({
  inputTokens: tokenCount,
  outputTokens: tokenCount,
  cacheReadTokens: tokenCount.optional(),
  cacheWriteTokens: tokenCount.optional(),
  reasoningTokens: tokenCount.optional(),
  costUsd: z.number().nonnegative().optional(),
});

/**
 * The provider's own blocks of an assistant step that must be sent back with the history
 * (contracts §13): a JSON object, stored verbatim. Written by the providers
 * (worker/models/provider-state.ts): `{ "provider", "api", "target", ... }`; replayed only to
 * the same provider, api and target, and ignored by every other.
 */
export const providerStateSchema = z.record(z.string(), z.unknown());

export const userMessageSchema = z.strictObject({
  role: z.literal("user"),
  content: z.string(),
  ...storedFields,
});
export const internalMessageSchema = z.strictObject({
  role: z.literal("internal"),
  content: z.string(),
  ...storedFields,
});
/**
 * The most tool calls one model step may ask for (contracts §12): a history with more is a
 * 400, a scripted step with more is refused with its agent, and a model's answer with more is
 * cut there and interrupted, like one past FLEET_MODEL_MAX_OUTPUT_CHARS (call-model.ts).
 */
export const MAX_TOOL_CALLS_PER_STEP = 1_000;
const TOO_MANY_CALLS = `has more than ${MAX_TOOL_CALLS_PER_STEP} tool calls (the most one step may ask for)`;

export const assistantMessageSchema = z.strictObject({
  role: z.literal("assistant"),
  content: z.string(),
  toolCalls: z.array(toolCallSchema).max(MAX_TOOL_CALLS_PER_STEP, TOO_MANY_CALLS).optional(),
  stopReason: nonEmpty,
  /**
   * Token usage of the step as the provider reported it (contracts §13): `null` when the
   * provider reported none, or none is known — unknown, not 0 tokens. A stored message always
   * reads back with it, `null` for a scripted model's step, a step cut short and an imported
   * message too (rows.ts; fenced-writes.ts gives a MESSAGE event the same); it may be left out
   * only of a message not stored yet (one being imported, or built by call-model.ts).
   */
  usage: usageSchema.nullable().optional(),
  /** The provider's blocks to replay with the history (contracts §13); absent for a cut-off step. */
  providerState: providerStateSchema.optional(),
  ...storedFields,
});
export const toolMessageSchema = z.strictObject({
  role: z.literal("tool"),
  toolCallId: nonEmpty,
  name: nonEmpty,
  content: z.string(),
  success: z.boolean(),
  ...storedFields,
});

export const messageSchema = z.discriminatedUnion("role", [
  userMessageSchema,
  internalMessageSchema,
  assistantMessageSchema,
  toolMessageSchema,
]);

/**
 * A message of a history to import: as `messageSchema`, but an assistant step may carry
 * `stopReason: ""`, which is how a step stored without a stop reason reads back (rows.ts), so
 * that what `GET /v1/sessions/:id` (and `fleet session export`) gives goes back in as it came
 * out. Such a step is classified `unknown_stop`, as at its origin.
 */
const importedMessageSchema = z.discriminatedUnion("role", [
  userMessageSchema,
  internalMessageSchema,
  assistantMessageSchema.extend({ stopReason: z.string() }),
  toolMessageSchema,
]);

export type ToolCall = z.infer<typeof toolCallSchema>;
export type Usage = z.infer<typeof usageSchema>;
/**
 * A run's usage (`runs.usage`): its steps' reported usage summed, and `unknownSteps`, its
 * steps whose provider reported none (the sums count nothing for them).
 */
export type RunUsage = Usage & { unknownSteps?: number };
export type ProviderState = z.infer<typeof providerStateSchema>;
type Plain<T> = Omit<T, "seq" | "createdAt">;
export type UserMessage = Plain<z.infer<typeof userMessageSchema>>;
export type InternalMessage = Plain<z.infer<typeof internalMessageSchema>>;
export type AssistantMessage = Plain<z.infer<typeof assistantMessageSchema>>;
export type ToolMessage = Plain<z.infer<typeof toolMessageSchema>>;
export type Message = UserMessage | InternalMessage | AssistantMessage | ToolMessage;
export type Role = Message["role"];
/** A message as read back from the store. */
export type StoredMessage = Message & { seq: number; createdAt: string };

/** Strip the stored-only fields so a message compares and re-stores as plain input. */
function plain(message: z.infer<typeof messageSchema>): Message {
  const { seq: _seq, createdAt: _createdAt, ...rest } = message;
  return rest as Message;
}

/**
 * A message of a history to import: `createdAt` is the one it was given, when that is an ISO
 * 8601 date and time with a zone (`2026-12-04T13:58:19.364Z`, as a stored message reads back),
 * normalised to UTC milliseconds; the store keeps it, so an exported history imported again
 * keeps its times. Any other `createdAt` is ignored, as before: the message is stored now.
 */
export type ImportedMessage = Message & { createdAt?: string };

const ISO_INSTANT = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/;

/** `value` as a stored `createdAt` (see ImportedMessage), or undefined. */
export function importedCreatedAt(value: unknown): string | undefined {
  if (typeof value !== "string" || !ISO_INSTANT.test(value)) return undefined;
  const time = Date.parse(value);
  // Postgres's timestamptz holds years 4713 BC to 294276 AD, but reads neither year 0000 (there
  // is none: 1 BC is `0001-01-01 BC`) nor ISO's six-digit years (`+010000-…`), which a time of
  // year 9999 with a negative offset becomes in UTC: both were a 500. Only years 1 to 9999 in UTC.
  return time >= FIRST_INSTANT && time <= LAST_INSTANT ? new Date(time).toISOString() : undefined;
}

const FIRST_INSTANT = Date.parse("0001-01-01T00:00:00.000Z");
const LAST_INSTANT = Date.parse("9999-12-31T23:59:59.999Z");

/**
 * Parses an unknown value as one message. Throws ValidationError naming the field, also
 * when a string in it (object keys of tool call arguments included) holds U+0000 or a lone
 * surrogate: such a message could never be stored, so it is not a valid message.
 */
export function parseMessage(value: unknown, root = "message", imported = false): Message {
  const result = (imported ? importedMessageSchema : messageSchema).safeParse(value);
  if (!result.success) throw toValidationError(root, result.error);
  const message = plain(result.data);
  assertStorable(message, root);
  return message;
}

/**
 * The longest tool call id stored as it is. Providers' ids are a few dozen characters; the
 * store indexes ids (one result per call), and Postgres cannot index a value of about 2 KB
 * or more. An imported id longer is refused; a model's is replaced (call-model.ts).
 */
export const MAX_TOOL_CALL_ID = 256;
const TOO_LONG_ID = `is longer than ${MAX_TOOL_CALL_ID} characters`;

/**
 * Parses an unknown value as a history: a JSON array of messages. Besides the schema, the
 * tool call ids of one assistant message must be distinct (otherwise no result could say
 * which call it answers). Pairing faults (a result that answers no call, a call answered
 * twice) are valid here: `resumePoint` reports them `malformed`. Tool call ids are at most
 * MAX_TOOL_CALL_ID characters. A cut-off response
 * (`interrupted`) carries no `providerState` (contracts §13). Throws ValidationError naming
 * the index and field.
 */
export function parseHistory(value: unknown, root = "messages"): Message[] {
  return parseMessages(value, root, false);
}

/** `parseHistory` of a history to store: each message keeps a valid `createdAt` (ImportedMessage). */
export function parseImportedHistory(value: unknown, root = "messages"): ImportedMessage[] {
  return parseMessages(value, root, true);
}

/**
 * `parseImportedHistory` a slice of messages a turn of the event loop (event-loop-slices.ts):
 * the same messages and the same first error, while the API goes on answering other requests
 * through an import of 10,000.
 */
export async function parseImportedHistoryInSlices(
  value: unknown,
  root = "messages",
): Promise<ImportedMessage[]> {
  if (!Array.isArray(value)) throw new ValidationError(root, "must be a JSON array of messages");
  return mapInSlices(value, (item, index) => parseListed(item, index, root, true));
}

function parseMessages(value: unknown, root: string, keepCreatedAt: boolean): ImportedMessage[] {
  if (!Array.isArray(value)) throw new ValidationError(root, "must be a JSON array of messages");
  return value.map((item, index) => parseListed(item, index, root, keepCreatedAt));
}

/** Message `index` of a history: its schema, its createdAt, its calls' ids. */
function parseListed(item: unknown, index: number, root: string, keepCreatedAt: boolean): ImportedMessage {
  const message: ImportedMessage = parseMessage(item, `${root}[${index}]`, keepCreatedAt);
  const createdAt = keepCreatedAt
    ? importedCreatedAt((item as { createdAt?: unknown }).createdAt)
    : undefined;
  if (createdAt !== undefined) message.createdAt = createdAt;
  if (message.role === "assistant") {
    if (message.stopReason === "interrupted" && message.providerState !== undefined) {
      throw new ValidationError(
        `${root}[${index}].providerState`,
        'a response that was cut off (stopReason "interrupted") keeps no providerState',
      );
    }
    const seen = new Set<string>();
    for (const [i, call] of (message.toolCalls ?? []).entries()) {
      if (call.id.length > MAX_TOOL_CALL_ID)
        throw new ValidationError(`${root}[${index}].toolCalls[${i}].id`, TOO_LONG_ID);
      if (seen.has(call.id)) {
        throw new ValidationError(
          `${root}[${index}].toolCalls[${i}].id`,
          `duplicate tool call id "${call.id}"`,
        );
      }
      seen.add(call.id);
    }
  }
  if (message.role === "tool" && message.toolCallId.length > MAX_TOOL_CALL_ID)
    throw new ValidationError(`${root}[${index}].toolCallId`, TOO_LONG_ID);
  return message;
}

/**
 * Refuses a history to be stored in which a call id has two results after one assistant
 * message: the store answers each call at most once (a unique index), so such an import
 * could only fail there. Other pairing faults are stored and classified `malformed`.
 */
export function assertAnsweredOnce(
  history: readonly Message[],
  root = "messages",
  stored = 0,
  /** The index of `history`'s first message in the session's (a stored tail and a page after it). */
  start = 0,
): void {
  /** Results since the latest assistant message: call id → index of its result. */
  let answered: Map<string, number> | undefined;
  // `stored`: how many of `history` are stored already (an import continued in pages): the
  // fields are named in the page, `root[i]` its i-th message, `stored messages` before it.
  const at = (index: number) =>
    index >= stored ? `${root}[${index - stored}]` : `the stored message with seq ${start + index + 1}`;
  for (const [index, message] of history.entries()) {
    if (message.role === "assistant") answered = new Map();
    if (message.role !== "tool" || !answered) continue;
    const first = answered.get(message.toolCallId);
    if (first !== undefined) {
      throw new ValidationError(
        `${at(index)}.toolCallId`,
        `tool call "${message.toolCallId}" already has a result (${at(first)}) after the same assistant message; a call is answered at most once`,
      );
    }
    answered.set(message.toolCallId, index);
  }
}
