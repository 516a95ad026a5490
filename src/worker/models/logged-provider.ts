/**
 * Provider errors in the worker's log (issue "Operations that tell the truth"): every failed
 * model request — each attempt, the retried ones included — is one `warn` line
 * "provider error" with what an operator needs to act and nothing that could leak:
 * `sessionId`, `runId`, `workerId`, `provider`, `endpoint` (the declared endpoint's name, if
 * the MODEL named one), `host` (where the request went), `status` (the HTTP status, absent
 * for an error inside a stream or a broken connection), `type` (the provider's error type
 * or code), `retryable`, and `error`: the message with every key scrubbed (scrub-secrets.ts).
 * A request the run itself cancelled is not a provider error and is not logged.
 */
import type { Logger } from "pino";
import { scrubSecrets, secretValuesFromEnv } from "../../shared/scrub-secrets.js";
import { passThrough } from "./pass-through.js";
import { type ModelEvent, type ModelProvider, type ModelRequest, ProviderError } from "./provider.js";

export type ProviderLogContext = { runId: string; workerId?: string };

/** The fields of the "provider error" line (pure; exported for tests). */
export function providerErrorFields(
  error: unknown,
  request: Pick<ModelRequest, "sessionId">,
  context: ProviderLogContext,
  env: Readonly<Record<string, string | undefined>> = process.env,
): Record<string, unknown> {
  const message = error instanceof Error ? error.message : String(error);
  const info = error instanceof ProviderError ? error.info : {};
  return {
    sessionId: request.sessionId,
    runId: context.runId,
    ...(context.workerId === undefined ? {} : { workerId: context.workerId }),
    provider: info.provider ?? null,
    endpoint: info.endpoint ?? null,
    host: info.host ?? null,
    status: info.status ?? null,
    type: info.type ?? null,
    retryable: error instanceof ProviderError ? error.retryable : true,
    error: scrubSecrets(message, secretValuesFromEnv(env)),
  };
}

/** `model`, with each failed request logged at warn (see the file comment). */
export function withProviderErrorLog(
  model: ModelProvider,
  log: Pick<Logger, "warn">,
  context: ProviderLogContext,
): ModelProvider {
  return new ProviderErrorLog(model, log, context);
}

/**
 * A class, not an object literal with its own `stream`, so that one method serves all runs. Its
 * stream is a pass-through iterator (pass-through.ts), not an `async *` generator re-yielding
 * each event: that was a few promises and microtask turns per event on every model call.
 */
class ProviderErrorLog implements ModelProvider {
  declare identity?: ModelProvider["identity"];
  constructor(
    private readonly model: ModelProvider,
    private readonly log: Pick<Logger, "warn">,
    private readonly context: ProviderLogContext,
  ) {
    if (model.identity !== undefined) this.identity = model.identity;
  }

  stream(request: ModelRequest): AsyncIterable<ModelEvent> {
    return passThrough(() => this.model.stream(request), {
      onError: (error) => {
        if (!request.signal.aborted)
          this.log.warn(providerErrorFields(error, request, this.context), "provider error");
      },
    });
  }
}
