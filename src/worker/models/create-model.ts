/**
 * Builds the provider a model configuration names, sending a key only where the operator
 * sends it (contracts.md §11): the model's route is resolved against the worker's own
 * configuration — again, although the API checked it, since a stored agent or an old job may
 * predate the rule. A route that is not allowed throws a ValidationError (the run ends
 * `invalid_agent`, the session is parked, nothing is sent).
 *
 * The OpenAI and Anthropic providers (and their SDKs) are loaded at a model's first request,
 * not when the worker starts: the two SDKs are 426 of the 807 ES modules a worker loaded at
 * its start, ~0.45 s of CPU of its ~1.5 s, paid by every `fleet worker` (each worker a test
 * spawns, each one `fleet up` starts or restarts) whether or not it ever talks to a provider.
 * test/worker-imports.test.ts checks that nothing the worker imports statically reaches them.
 */
import type { Redis } from "ioredis";
import type { ModelConfig } from "../../shared/agent-config.js";
import { FleetStateError } from "../../shared/errors.js";
import { type ModelRoute, type ModelRouting, resolveModelRoute } from "../../shared/model-endpoints.js";
import { priceOf, pricesOf } from "../../shared/prices.js";
import { assertNever } from "../../shared/resume-point.js";
import type { ModelIdentity, ModelProvider, ProviderKey } from "./provider.js";
import { type FaultCounter, ScriptedModel } from "./scripted.js";

export type ModelDeps = {
  faults: FaultCounter;
  /** Endpoints, allowed base URLs and keys: the workers' configuration only, never a payload. */
  routing: ModelRouting;
};

/** Fault counts of the scripted model, shared by every worker of a fleet. */
export function redisFaultCounter(redis: Redis, prefix: string): FaultCounter {
  return {
    async increment(key) {
      const k = `${prefix}:scripted-faults:${key}`;
      const [[, count]] = (await redis.multi().incr(k).expire(k, 86_400).exec()) as [[null, number]];
      return count;
    },
  };
}

/**
 * The route of an OpenAI or Anthropic model on this worker. An endpoint this worker's
 * FLEET_MODEL_ENDPOINTS does not declare was said as "no endpoint named … is declared in
 * FLEET_MODEL_ENDPOINTS", the API's words for a request: but the API took the run, so it is
 * most likely declared there and missing here (the variable set on the API's deployment only),
 * and the tenant read the parked reason as its agent's fault
 * (test/worker-endpoints-differ.test.ts).
 */
function workerRoute(
  config: ModelConfig & { endpoint?: string },
  routing: ModelRouting,
  field: string,
): ModelRoute {
  try {
    return resolveModelRoute(config, routing, field)!;
  } catch (error) {
    const name = config.endpoint;
    if (!(error instanceof FleetStateError) || name === undefined || routing.endpoints.has(name)) throw error;
    throw new FleetStateError(
      error.field,
      `no endpoint named ${JSON.stringify(name)} is declared in this worker's FLEET_MODEL_ENDPOINTS ` +
        "(the API took the run, so its own may declare it): give the API and every worker the same FLEET_MODEL_ENDPOINTS",
    );
  }
}

/** `field` names the model in errors: `agent.model`, `run.model`. */
export function createModel(config: ModelConfig, deps: ModelDeps, field = "model"): ModelProvider {
  switch (config.provider) {
    case "scripted":
      return new ScriptedModel(config.steps, { faults: deps.faults, settings: deps.routing.scripted });
    case "openai": {
      const route = workerRoute(config, deps.routing, field);
      return priced(
        onFirstRequest(
          { provider: "openai", model: config.model },
          async () => new (await import("./openai.js")).OpenAIModel(routed(config, route), keyOf(route)),
        ),
        deps,
      );
    }
    case "anthropic": {
      const route = workerRoute(config, deps.routing, field);
      return priced(
        onFirstRequest(
          { provider: "anthropic", model: config.model },
          async () =>
            new (await import("./anthropic.js")).AnthropicModel(routed(config, route), keyOf(route)),
        ),
        deps,
      );
    }
    default:
      return assertNever(config);
  }
}

/**
 * The model with its price (FLEET_PRICES, carried by the routing the worker was given:
 * config.ts `models.prices`), for the cost of its steps (call-model.ts).
 */
function priced(model: ModelProvider & { identity: ModelIdentity }, deps: ModelDeps): ModelProvider {
  const price = priceOf(pricesOf(deps.routing), model.identity);
  if (!price) return model;
  return { identity: { ...model.identity, price }, stream: (request) => model.stream(request) };
}

/**
 * A provider whose module is imported (and the provider made) at its first request, then
 * kept: `identity` is the one the provider would give itself (its provider and model).
 */
function onFirstRequest(
  identity: ModelIdentity,
  load: () => Promise<ModelProvider>,
): ModelProvider & { identity: ModelIdentity } {
  let model: Promise<ModelProvider> | undefined;
  return {
    identity,
    async *stream(request) {
      model ??= load();
      yield* (await model).stream(request);
    },
  };
}

/** The model with the route's base URL in place of whatever the payload said. */
function routed<T extends { baseUrl?: string }>(config: T, route: ModelRoute): T {
  const { baseUrl: _ignored, ...rest } = config;
  return (route.baseUrl === undefined ? rest : { ...rest, baseUrl: route.baseUrl }) as T;
}

function keyOf(route: ModelRoute): ProviderKey {
  if (route.keyEnv === undefined) return { keyless: true };
  if (route.apiKey) return { apiKey: route.apiKey };
  // The message is the run's error and parked reason, which tenants read: an endpoint's
  // variable is named by the operator's text, which may be a key pasted there by mistake
  // (hf_…, gsk_… fit a name), so it is named by its endpoint; the defaults by their names.
  const which =
    route.endpoint === undefined
      ? route.keyEnv
      : `the key of endpoint "${route.endpoint}" (the variable its apiKeyEnv names)`;
  return { missingKey: `${which} is not set in the worker's environment` };
}
