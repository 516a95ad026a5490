/**
 * A batch's sessions as a request gives them, checked before anything is stored (pure): errors
 * name `sessions[i]…`, and a batch is refused whole.
 */
import type { z } from "zod";
import { parseAgentConfig } from "../shared/agent-config.js";
import { ValidationError } from "../shared/errors.js";
import { assertAnsweredOnce } from "../shared/messages.js";
import { checkAgentModels, type ModelRouting } from "../shared/model-endpoints.js";
import { assertPricedForBudget, pricesOf } from "../shared/prices.js";
import { resumePoint } from "../shared/resume-point.js";
import type { NewSession } from "../shared/store/session-queries.js";
import { parseBoundedImport } from "../shared/usage.js";
import { type batchItem, importedCount } from "./request-bodies.js";
import { MAX_REQUEST_MESSAGES } from "./request-limits.js";

/**
 * The sessions to store: customIds unique within the batch, at most MAX_REQUEST_MESSAGES
 * imported in all, each agent's models routed and priced for its budget, each history
 * answered once, and one given new input able to take it.
 */
export function parseBatchEntries(
  tenant: string,
  entries: z.infer<typeof batchItem>[],
  routing: ModelRouting,
): NewSession[] {
  const seen = new Map<string, number>();
  for (const [i, item] of entries.entries()) {
    if (item.customId === undefined) continue;
    if (seen.has(item.customId))
      throw new ValidationError(
        `sessions[${i}].customId`,
        `repeats the customId of sessions[${seen.get(item.customId)}]; customIds are unique within a batch`,
      );
    seen.set(item.customId, i);
  }
  let imported = 0;
  for (const [i, item] of entries.entries())
    imported += importedCount(item.messages, `sessions[${i}].messages`);
  if (imported > MAX_REQUEST_MESSAGES)
    throw new ValidationError(
      "sessions",
      `import ${imported.toLocaleString("en")} messages in all; one request imports at most ${MAX_REQUEST_MESSAGES.toLocaleString("en")}`,
    );
  const items = entries.map((item, i) => ({
    agent: parseAgentConfig(item.agent, `sessions[${i}].agent`),
    metadata: item.metadata,
    messages: item.messages === undefined ? [] : parseBoundedImport(item.messages, `sessions[${i}].messages`),
    input: item.input,
    customId: item.customId,
    sessionEvents: item.sessionEvents,
    tenant,
  }));
  for (const [i, item] of items.entries()) {
    checkAgentModels(item.agent, routing, `sessions[${i}].agent`);
    assertPricedForBudget(item.agent, pricesOf(routing), `sessions[${i}].agent`);
    assertAnsweredOnce(item.messages, `sessions[${i}].messages`);
    if (item.input === undefined) continue;
    const point = resumePoint(item.messages);
    if (!point.resumable && point.reason === "malformed") {
      throw new ValidationError(
        `sessions[${i}].messages`,
        "calls and results do not pair up; it cannot take new input",
      );
    }
  }
  return items;
}
