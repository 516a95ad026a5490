/**
 * A batch's sessions as a request gives them, checked before anything is stored (pure): errors
 * name `sessions[i]…`, and a batch is refused whole.
 */
import type { z } from "zod";
import type { AgentConfig, ModelConfig } from "../shared/agent-config.js";
import { ValidationError } from "../shared/errors.js";
import { nextTurn, SLICE_ITEMS } from "../shared/event-loop-slices.js";
import { assertAnsweredOnce, type ImportedMessage } from "../shared/messages.js";
import { checkAgentModels, type ModelRouting } from "../shared/model-endpoints.js";
import { ParsedAgents } from "../shared/parsed-agents.js";
import { assertPricedForBudget, pricesOf } from "../shared/prices.js";
import { resumePoint } from "../shared/resume-point.js";
import type { NewSession } from "../shared/store/session-queries.js";
import { parseBoundedImportInSlices } from "../shared/usage.js";
import { type batchItem, importedCount } from "./request-bodies.js";
import { MAX_REQUEST_MESSAGES } from "./request-limits.js";

/**
 * The scripted steps and fallback models an agent lists (each up to 10,000 steps and 100
 * models): a batch of 1,000 agents, each its own, parses as many as a body holds, so they
 * count toward a slice as messages do.
 */
function listedItems(agent: AgentConfig): number {
  const steps = (model: ModelConfig) => (model.provider === "scripted" ? model.steps.length : 1);
  return steps(agent.model) + (agent.fallbackModels ?? []).reduce((n, model) => n + steps(model), 0);
}

/**
 * The sessions to store: customIds unique within the batch, at most MAX_REQUEST_MESSAGES
 * imported in all, each agent's models routed and priced for its budget, each history
 * answered once, and one given new input able to take it. The messages are parsed a slice at
 * a time (event-loop-slices.ts): a batch imports up to 50,000.
 */
export async function parseBatchEntries(
  tenant: string,
  entries: z.infer<typeof batchItem>[],
  routing: ModelRouting,
): Promise<NewSession[]> {
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
  const items: (NewSession & { messages: ImportedMessage[] })[] = [];
  /** Messages parsed since the last turn of the event loop: many small histories make a slice too. */
  let sinceTurn = 0;
  // The entries' equal agents (most batches give all their sessions one) are parsed once.
  const agents = new ParsedAgents(entries.length);
  for (const [i, item] of entries.entries()) {
    const agent = agents.parse(item.agent, `sessions[${i}].agent`);
    const messages =
      item.messages === undefined
        ? []
        : await parseBoundedImportInSlices(item.messages, `sessions[${i}].messages`);
    sinceTurn += messages.length + listedItems(agent);
    if (sinceTurn >= SLICE_ITEMS) {
      sinceTurn = 0;
      await nextTurn();
    }
    items.push({
      agent,
      metadata: item.metadata,
      messages,
      input: item.input,
      customId: item.customId,
      sessionEvents: item.sessionEvents,
      tenant,
    });
  }
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
