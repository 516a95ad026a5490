/**
 * The parts of the `/v1` schemas (api-schemas.ts) that every route family uses: an id, a
 * time, the error answer, and summed usage.
 */
import { z } from "zod";
import { TENANT_LIMITS } from "../shared/errors.js";

export const id = z.string().min(1);
export const when = z.string().describe("ISO 8601 time");

export const errorSchema = z
  .object({
    error: z.object({
      code: z.string(),
      message: z.string(),
      field: z.string().optional().describe("Where the problem is, e.g. `messages[2].content` (400)"),
      reason: z
        .string()
        .optional()
        .describe(
          "Why there is nothing to resume, or `idempotency_key_reused`, `batch_closed`, `batch_cancelled` (409)",
        ),
      limit: z
        .enum(TENANT_LIMITS)
        .optional()
        .describe(
          "Which limit (429): a tenant's, the client address's (`auth_failures`), the session's (`queued_runs`) or the API process's (`big_bodies`, `big_answers`); `results_reads`: a tenant's on one API process",
        ),
      retryAfter: z.number().int().optional().describe("Seconds to wait, as in Retry-After (429)"),
    }),
  })
  .meta({ id: "Error" });

/** Summed usage of a session's (or a set of sessions') model steps (prices.ts `UsageTotals`). */
export const usageTotalsSchema = z
  .object({
    inputTokens: z.number(),
    outputTokens: z.number(),
    cacheReadTokens: z.number(),
    cacheWriteTokens: z.number(),
    reasoningTokens: z.number(),
    costUsd: z.number(),
    unknownSteps: z
      .number()
      .int()
      .describe(
        "Model steps whose provider reported no usage: the sums count nothing for them (0 tokens with unknownSteps > 0 is not known, not free)",
      ),
  })
  .meta({ id: "UsageTotals" });
