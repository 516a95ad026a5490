/**
 * Model endpoints (contracts.md §11): a worker sends a key only to the endpoint the operator
 * declared it for.
 *
 * - `FLEET_MODEL_ENDPOINTS` declares named endpoints `{ NAME: { provider, baseUrl?, apiKeyEnv? } }`.
 *   An entry without `baseUrl` is the provider's own host and gets its key from `apiKeyEnv`,
 *   by default OPENAI_API_KEY / ANTHROPIC_API_KEY. An entry with `baseUrl` gets the key of
 *   `apiKeyEnv` when it names one, and no key otherwise (the operator names the variable to
 *   send one: a default key never follows a URL by itself). A `baseUrl` with a user name or
 *   password is refused: fetch refuses it too, quoting it whole in its error.
 * - `FLEET_ALLOWED_BASE_URLS` lists URL prefixes a MODEL may name as a raw `baseUrl`. Such a
 *   request never carries a key from the environment. How a URL is matched against them:
 *   allowed-base-urls.ts.
 * - A MODEL with neither goes to the provider's own host with OPENAI_API_KEY / ANTHROPIC_API_KEY.
 *
 * The API checks every MODEL it accepts against this (400 naming the field); the worker checks
 * again before each run, since a stored agent or an old job may predate the rule.
 */
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { z } from "zod";
import type { AgentConfig, ModelConfig } from "./agent-config.js";
import { type AllowedBaseUrl, isAllowedBaseUrl } from "./allowed-base-urls.js";
import { FleetStateError, ValidationError } from "./errors.js";
import { type EndpointLimits, endpointLimitsSchema, hasLimits } from "./provider-limits.js";

export type EndpointProvider = "openai" | "anthropic";

export type ModelEndpoint = {
  name: string;
  provider: EndpointProvider;
  /** Undefined: the provider's own host. */
  baseUrl?: string;
  /** The environment variable its key is read from; undefined: no key is sent. */
  apiKeyEnv?: string;
  /** The value of `apiKeyEnv` when the configuration was loaded. */
  apiKey?: string;
  /** Limits the fleet holds across all its workers (contracts §15); undefined: none declared. */
  limits?: EndpointLimits;
};

/** Everything that decides where a model request goes and with which key. */
export type ModelRouting = {
  endpoints: ReadonlyMap<string, ModelEndpoint>;
  allowedBaseUrls: readonly AllowedBaseUrl[];
  /** OPENAI_API_KEY / ANTHROPIC_API_KEY, for MODELs with neither `endpoint` nor `baseUrl`. */
  apiKeys: { openai?: string; anthropic?: string };
  /** FLEET_SCRIPTED_MODEL and FLEET_SCRIPTED_MAX_DELAY_MS; undefined: allowed, steps' own bound. */
  scripted?: ScriptedSettings;
};

/** What the operator allows of the scripted model, which costs no provider anything. */
export type ScriptedSettings = { enabled: boolean; maxDelayMs: number };

/** Where one model's requests go. */
export type ModelRoute = {
  /** Undefined: the provider's own host. */
  baseUrl?: string;
  /** The key to send; undefined with `keyEnv` set: the variable is empty, the run cannot start. */
  apiKey?: string;
  /** The variable the key comes from; undefined: no key is wanted (a raw baseUrl, or an endpoint with none). */
  keyEnv?: string;
  /** The endpoint's name, when the MODEL named one. */
  endpoint?: string;
};

export const DEFAULT_KEY_ENV: Record<EndpointProvider, string> = {
  openai: "OPENAI_API_KEY",
  anthropic: "ANTHROPIC_API_KEY",
};

export const EMPTY_ROUTING: ModelRouting = { endpoints: new Map(), allowedBaseUrls: [], apiKeys: {} };

// ---------------------------------------------------------------------------------------------
// FLEET_MODEL_ENDPOINTS

const ENDPOINT_NAME = /^[A-Za-z0-9_.-]{1,100}$/;

function parsedUrl(value: string): URL | null {
  try {
    return new URL(value);
  } catch {
    return null;
  }
}

const endpointSchema = z.strictObject({
  provider: z.enum(["openai", "anthropic"]),
  baseUrl: z
    .string()
    .refine((value) => {
      const url = parsedUrl(value);
      return url?.protocol === "http:" || url?.protocol === "https:";
    }, "must be an http:// or https:// URL")
    // fetch refuses such a URL at every request with a TypeError that quotes it whole,
    // password included: that text became every run's error and parked reason.
    .refine((value) => {
      const url = parsedUrl(value);
      return !url?.username && !url?.password;
    }, "must not carry a user name or password; name the variable that holds the key with apiKeyEnv")
    .optional(),
  apiKeyEnv: z
    .string()
    .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "must be the name of an environment variable")
    .optional(),
  apiKey: z
    .never({ error: "a key is never written here; name the variable that holds it with apiKeyEnv" })
    .optional(),
  limits: endpointLimitsSchema.optional(),
});

/** The JSON text of FLEET_MODEL_ENDPOINTS: the value itself when it starts with `{` (or `[`), else a file's. */
function endpointsText(value: string, variable: string): string {
  const trimmed = value.trim();
  if (trimmed.startsWith("{") || trimmed.startsWith("[")) return trimmed;
  const path = resolve(trimmed);
  try {
    // Without a leading byte order mark ("UTF-8 with BOM"), which RFC 8259 lets a reader skip:
    // JSON.parse refused it as an invisible `Unexpected token '\uFEFF'`.
    return readFileSync(path, "utf8").replace(/^\uFEFF/, "");
  } catch (error) {
    const code = (error as { code?: string }).code ?? (error as Error).message;
    throw new ValidationError(
      variable,
      `cannot read the file ${path} (${code}); give a JSON object or a file path`,
    );
  }
}

/**
 * FLEET_MODEL_ENDPOINTS, validated; keys are read from `env` (config.ts passes the process
 * environment). Throws a ValidationError naming the entry, e.g. `FLEET_MODEL_ENDPOINTS.local.baseUrl`.
 */
export function parseModelEndpoints(
  value: string | undefined,
  env: Record<string, string | undefined>,
  variable = "FLEET_MODEL_ENDPOINTS",
): Map<string, ModelEndpoint> {
  const endpoints = new Map<string, ModelEndpoint>();
  if (value === undefined || value.trim() === "") return endpoints;
  let json: unknown;
  try {
    json = JSON.parse(endpointsText(value, variable));
  } catch (error) {
    if (error instanceof ValidationError) throw error;
    throw new ValidationError(variable, `is not valid JSON: ${(error as Error).message}`);
  }
  if (typeof json !== "object" || json === null || Array.isArray(json))
    throw new ValidationError(variable, 'must be a JSON object { "NAME": { "provider": ... } }');
  for (const [name, entry] of Object.entries(json)) {
    const field = `${variable}.${name}`;
    if (!ENDPOINT_NAME.test(name))
      throw new ValidationError(field, "an endpoint name is 1-100 letters, digits, '_', '.' or '-'");
    const result = endpointSchema.safeParse(entry);
    if (!result.success) {
      const issue = result.error.issues[0]!;
      const path = issue.path.map(String).join(".");
      throw new ValidationError(
        path ? `${field}.${path}` : field,
        issue.message.replace(/^Invalid input: /, ""),
      );
    }
    const { provider, baseUrl, apiKeyEnv: declared, limits } = result.data;
    // The provider's own host gets the provider's key unless told otherwise; another host
    // gets a key only when the operator names its variable.
    const apiKeyEnv = declared ?? (baseUrl === undefined ? DEFAULT_KEY_ENV[provider] : undefined);
    const apiKey = apiKeyEnv === undefined ? undefined : env[apiKeyEnv] || undefined;
    endpoints.set(name, {
      name,
      provider,
      ...(baseUrl === undefined ? {} : { baseUrl }),
      ...(apiKeyEnv === undefined ? {} : { apiKeyEnv }),
      ...(apiKey === undefined ? {} : { apiKey }),
      ...(hasLimits(limits) ? { limits } : {}),
    });
  }
  return endpoints;
}

// ---------------------------------------------------------------------------------------------
// Routing a MODEL

/**
 * Where `model`'s requests go and with which key. Throws a ValidationError naming
 * `<field>.endpoint` (unknown, or declared for another provider) or `<field>.baseUrl` (not
 * under FLEET_ALLOWED_BASE_URLS, or given with `endpoint`); a FleetStateError when it is the
 * operator's settings that refuse it (an Idempotency-Key does not keep that answer). Scripted models have no route.
 */
export function resolveModelRoute(
  model: ModelConfig,
  routing: ModelRouting,
  field = "model",
): ModelRoute | null {
  if (model.provider === "scripted") {
    checkScripted(model, routing.scripted, field);
    return null;
  }
  const { endpoint: name, baseUrl } = model;
  if (name !== undefined) {
    if (baseUrl !== undefined)
      throw new ValidationError(`${field}.baseUrl`, "give either endpoint or baseUrl, not both");
    const endpoint = routing.endpoints.get(name);
    if (!endpoint)
      throw new FleetStateError(
        `${field}.endpoint`,
        `no endpoint named "${name}" is declared in FLEET_MODEL_ENDPOINTS`,
      );
    if (endpoint.provider !== model.provider)
      throw new FleetStateError(
        `${field}.endpoint`,
        `endpoint "${name}" is declared for provider ${endpoint.provider}, not ${model.provider}`,
      );
    return {
      endpoint: name,
      ...(endpoint.baseUrl === undefined ? {} : { baseUrl: endpoint.baseUrl }),
      ...(endpoint.apiKeyEnv === undefined ? {} : { keyEnv: endpoint.apiKeyEnv }),
      ...(endpoint.apiKey === undefined ? {} : { apiKey: endpoint.apiKey }),
    };
  }
  if (baseUrl !== undefined) {
    if (!isAllowedBaseUrl(baseUrl, routing.allowedBaseUrls))
      throw new FleetStateError(
        `${field}.baseUrl`,
        routing.allowedBaseUrls.length === 0
          ? "a raw baseUrl is not allowed by this fleet (FLEET_ALLOWED_BASE_URLS is empty); name an endpoint the operator declared"
          : "is not under any entry of FLEET_ALLOWED_BASE_URLS; name an endpoint the operator declared",
      );
    // A raw URL never gets a key from the environment.
    return { baseUrl };
  }
  const apiKey = routing.apiKeys[model.provider];
  return { keyEnv: DEFAULT_KEY_ENV[model.provider], ...(apiKey === undefined ? {} : { apiKey }) };
}

/**
 * A scripted MODEL the operator's settings refuse (a FleetStateError): any when
 * FLEET_SCRIPTED_MODEL is off, else one with a step's `delayMs` above FLEET_SCRIPTED_MAX_DELAY_MS.
 */
function checkScripted(
  model: Extract<ModelConfig, { provider: "scripted" }>,
  settings: ScriptedSettings | undefined,
  field: string,
): void {
  if (!settings) return;
  if (!settings.enabled)
    throw new FleetStateError(
      `${field}.provider`,
      "the scripted model is turned off on this fleet (FLEET_SCRIPTED_MODEL=off)",
    );
  const i = model.steps.findIndex((step) => (step.delayMs ?? 0) > settings.maxDelayMs);
  if (i >= 0)
    throw new FleetStateError(
      `${field}.steps[${i}].delayMs`,
      `must be at most ${settings.maxDelayMs} on this fleet (FLEET_SCRIPTED_MAX_DELAY_MS)`,
    );
}

/** Checks an agent's model and fallback models (400 naming `<root>.model…` / `<root>.fallbackModels[i]…`). */
export function checkAgentModels(agent: AgentConfig, routing: ModelRouting, root = "agent"): void {
  resolveModelRoute(agent.model, routing, `${root}.model`);
  for (const [i, model] of (agent.fallbackModels ?? []).entries())
    resolveModelRoute(model, routing, `${root}.fallbackModels[${i}]`);
}

/**
 * The declared endpoint whose limits (contracts §15) a MODEL's requests count against: the one
 * it names, else the one that sends to the same place — for a raw `baseUrl`, an endpoint on the
 * same server (its origin: a query, a fragment or another path, `127.1` for `127.0.0.1`, reach
 * the same server; the endpoint whose path holds the raw one's is preferred), and with neither,
 * an endpoint of the provider's own host with the provider's own key (the same account).
 * Otherwise a tenant dodged an endpoint's limits and its tenants' shares by not naming it.
 * Undefined: the MODEL's requests are not gated.
 */
export function gateEndpointOf(
  model: ModelConfig,
  endpoints: ReadonlyMap<string, ModelEndpoint>,
): ModelEndpoint | undefined {
  if (model.provider === "scripted") return undefined;
  if (model.endpoint !== undefined) return endpoints.get(model.endpoint);
  const same = [...endpoints.values()].filter((e) => e.provider === model.provider);
  if (model.baseUrl === undefined)
    return same.find((e) => e.baseUrl === undefined && e.apiKeyEnv === DEFAULT_KEY_ENV[model.provider]);
  const raw = parsedUrl(model.baseUrl);
  if (raw === null) return undefined;
  const onServer = same.filter((e) => e.baseUrl !== undefined && parsedUrl(e.baseUrl)?.origin === raw.origin);
  const path = raw.pathname.replace(/\/+$/, "");
  return (
    onServer.find((e) => {
      const prefix = parsedUrl(e.baseUrl!)!.pathname.replace(/\/+$/, "");
      return path === prefix || path.startsWith(`${prefix}/`);
    }) ?? onServer[0]
  );
}
