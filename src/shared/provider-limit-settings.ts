/**
 * What an operator declares for the provider limits (contracts §15): an endpoint's `limits`
 * in FLEET_MODEL_ENDPOINTS, the tenants' weights (FLEET_TENANT_SHARES), and how a gate
 * behaves (`GateTuning`, from FLEET_ENDPOINT_* variables). Pure: read and checked here,
 * applied by provider-limits.ts.
 */
import { z } from "zod";
import { ValidationError } from "./errors.js";

export type EndpointLimits = {
  requestsPerMinute?: number;
  tokensPerMinute?: number;
  maxConcurrent?: number;
};

const positiveInt = z
  .number({ error: "must be a positive integer" })
  .int("must be a positive integer")
  .positive("must be a positive integer");

/** The `limits` of an endpoint in FLEET_MODEL_ENDPOINTS (contracts §15). */
export const endpointLimitsSchema = z.strictObject({
  requestsPerMinute: positiveInt.optional(),
  tokensPerMinute: positiveInt.optional(),
  maxConcurrent: positiveInt.optional(),
});

/** Whether an endpoint declares any limit. */
export function hasLimits(limits: EndpointLimits | undefined): limits is EndpointLimits {
  return (
    limits !== undefined &&
    (limits.requestsPerMinute !== undefined ||
      limits.tokensPerMinute !== undefined ||
      limits.maxConcurrent !== undefined)
  );
}

/** FLEET_TENANT_SHARES: `{"tenant": weight, ...}`; a tenant not named has weight 1. */
export type TenantShares = ReadonlyMap<string, number>;

export function parseTenantShares(value: string | undefined, variable = "FLEET_TENANT_SHARES"): TenantShares {
  const shares = new Map<string, number>();
  if (value === undefined || value.trim() === "") return shares;
  let json: unknown;
  try {
    json = JSON.parse(value);
  } catch (error) {
    throw new ValidationError(variable, `is not valid JSON: ${(error as Error).message}`);
  }
  if (typeof json !== "object" || json === null || Array.isArray(json))
    throw new ValidationError(variable, 'must be a JSON object { "TENANT": weight, ... }');
  for (const [tenant, weight] of Object.entries(json)) {
    if (typeof weight !== "number" || !Number.isFinite(weight) || weight <= 0 || weight > 1_000_000)
      throw new ValidationError(`${variable}.${tenant}`, "must be a number above 0 (a weight; default 1)");
    shares.set(tenant, weight);
  }
  return shares;
}

export function shareOf(shares: TenantShares, tenant: string): number {
  return shares.get(tenant) ?? 1;
}

/** How a gate behaves; every field has a default. */
export type GateTuning = {
  /** The longest a request waits in the worker for its slot; beyond, the job is handed back. Default 2 s. */
  maxWaitMs: number;
  /** How long a concurrency permit lives without renewal (a dead worker's permits free after it). Default 15 s. */
  permitTtlMs: number;
  /** The pause after a 429/529/overloaded answer that says nothing of when to come back. Default 5 s. */
  defaultPauseMs: number;
  /** The longest pause a provider may ask for. Default 10 min. */
  maxPauseMs: number;
  /** Tokens a response is assumed to add before its usage is known. Default 256. */
  expectedOutputTokens: number;
};

export const DEFAULT_GATE_TUNING: GateTuning = {
  maxWaitMs: 2_000,
  permitTtlMs: 15_000,
  defaultPauseMs: 5_000,
  maxPauseMs: 600_000,
  expectedOutputTokens: 256,
};

/**
 * Tuning from the environment (optional, for operators and tests): FLEET_ENDPOINT_MAX_WAIT_MS
 * (the longest in-worker wait before a hand-back), FLEET_ENDPOINT_PERMIT_TTL_MS (a dead
 * worker's concurrency permits free after it), FLEET_ENDPOINT_DEFAULT_PAUSE_MS (a 429 without
 * retry-after), FLEET_ENDPOINT_MAX_PAUSE_MS (the longest pause a provider's retry-after may
 * impose). Values that are not positive integers are ignored.
 */
export function gateTuningFromEnv(env: Record<string, string | undefined>): Partial<GateTuning> {
  const read = (name: string) => {
    const n = Number(env[name]);
    return Number.isInteger(n) && n > 0 ? n : undefined;
  };
  const tuning: Partial<GateTuning> = {};
  const maxWaitMs = read("FLEET_ENDPOINT_MAX_WAIT_MS");
  const permitTtlMs = read("FLEET_ENDPOINT_PERMIT_TTL_MS");
  const defaultPauseMs = read("FLEET_ENDPOINT_DEFAULT_PAUSE_MS");
  const maxPauseMs = read("FLEET_ENDPOINT_MAX_PAUSE_MS");
  if (maxWaitMs) tuning.maxWaitMs = maxWaitMs;
  if (permitTtlMs) tuning.permitTtlMs = permitTtlMs;
  if (defaultPauseMs) tuning.defaultPauseMs = defaultPauseMs;
  if (maxPauseMs) tuning.maxPauseMs = maxPauseMs;
  return tuning;
}
