/**
 * The message model of contracts.md §1, with runtime validation whose errors name the
 * offending message index and field (`messages[2].stopReason: ...`).
 */
import { z } from "zod";
import { ValidationError } from "./errors.js";

const nonEmpty = z.string().min(1, "must be a non-empty string");

export const toolCallSchema = z.strictObject({
  id: nonEmpty,
  name: nonEmpty,
  arguments: z.record(z.string(), z.unknown()),
});

/** Fields a stored message carries when read back; accepted (and ignored) on import. */
const storedFields = { seq: z.number().int().positive().optional(), createdAt: z.string().optional() };

export const usageSchema = z.strictObject({
  inputTokens: z.number().int().nonnegative(),
  outputTokens: z.number().int().nonnegative(),
});

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
export const assistantMessageSchema = z.strictObject({
  role: z.literal("assistant"),
  content: z.string(),
  toolCalls: z.array(toolCallSchema).optional(),
  stopReason: nonEmpty,
  /** Token usage of the step, when the provider reported it (an extension of contracts §1). */
  usage: usageSchema.optional(),
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

export type ToolCall = z.infer<typeof toolCallSchema>;
export type Usage = z.infer<typeof usageSchema>;
type Plain<T> = Omit<T, "seq" | "createdAt">;
export type UserMessage = Plain<z.infer<typeof userMessageSchema>>;
export type InternalMessage = Plain<z.infer<typeof internalMessageSchema>>;
export type AssistantMessage = Plain<z.infer<typeof assistantMessageSchema>>;
export type ToolMessage = Plain<z.infer<typeof toolMessageSchema>>;
export type Message = UserMessage | InternalMessage | AssistantMessage | ToolMessage;
export type Role = Message["role"];
/** A message as read back from the store. */
export type StoredMessage = Message & { seq: number; createdAt: string };

/** `messages[2].toolCalls[0].id` from a zod path under a given root. */
export function formatPath(root: string, path: readonly PropertyKey[]): string {
  let out = root;
  for (const key of path) out += typeof key === "number" ? `[${key}]` : out ? `.${String(key)}` : String(key);
  return out;
}

/** The first zod issue as a ValidationError naming its field. */
export function toValidationError(root: string, error: z.ZodError, discriminator = "role"): ValidationError {
  const issue = error.issues[0];
  if (!issue) return new ValidationError(root, "invalid");
  if (issue.code === "invalid_union") {
    const path = issue.path.at(-1) === discriminator ? issue.path : [...issue.path, discriminator];
    const options = (issue as { options?: unknown[] }).options;
    const expected =
      discriminator === "role"
        ? '"user", "internal", "assistant", "tool"'
        : (options ?? []).map((o) => JSON.stringify(o)).join(", ");
    return new ValidationError(formatPath(root, path), `must be one of ${expected}`);
  }
  if (issue.code === "unrecognized_keys") {
    return new ValidationError(
      formatPath(root, issue.path),
      `unknown field ${issue.keys.map((k) => `"${k}"`).join(", ")}`,
    );
  }
  return new ValidationError(formatPath(root, issue.path), issue.message.replace(/^Invalid input: /, ""));
}

/** Strip the stored-only fields so a message compares and re-stores as plain input. */
function plain(message: z.infer<typeof messageSchema>): Message {
  const { seq: _seq, createdAt: _createdAt, ...rest } = message;
  return rest as Message;
}

/**
 * Parses an unknown value as one message. Throws ValidationError naming the field.
 */
export function parseMessage(value: unknown, root = "message"): Message {
  const result = messageSchema.safeParse(value);
  if (!result.success) throw toValidationError(root, result.error);
  return plain(result.data);
}

/**
 * Parses an unknown value as a history: a JSON array of messages. Besides the schema, the
 * tool call ids of one assistant message must be distinct (otherwise no result could say
 * which call it answers). Throws ValidationError naming the index and field.
 */
export function parseHistory(value: unknown, root = "messages"): Message[] {
  if (!Array.isArray(value)) throw new ValidationError(root, "must be a JSON array of messages");
  return value.map((item, index) => {
    const message = parseMessage(item, `${root}[${index}]`);
    if (message.role === "assistant") {
      const seen = new Set<string>();
      for (const [i, call] of (message.toolCalls ?? []).entries()) {
        if (seen.has(call.id)) {
          throw new ValidationError(
            `${root}[${index}].toolCalls[${i}].id`,
            `duplicate tool call id "${call.id}"`,
          );
        }
        seen.add(call.id);
      }
    }
    return message;
  });
}
