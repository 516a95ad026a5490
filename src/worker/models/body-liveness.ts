/**
 * A provider's response body passed on unchanged while each chunk of it is reported
 * (`alive`): a sign of life for the idle limit of the step (model-attempt.ts). The SDKs drop
 * what carries no event — Anthropic's `ping` events, the SSE comments an OpenAI-compatible
 * server or router sends while its model works (`: keep-alive`, `: OPENROUTER PROCESSING`) —
 * so a model that thinks without streaming its thinking (Anthropic's `thinking.display:
 * "omitted"`, the default of recent models) sends the worker nothing it would see for as long
 * as it thinks, and was cut as idle past 120 s, billed, and asked again to think as long.
 * The step's own limit (FLEET_MODEL_STEP_TIMEOUT_MS) still bounds a server that only pings.
 */

/** `response` with its body watched: `alive` is called as each chunk passes. */
export function withLiveness(response: Response, alive: (() => void) | undefined): Response {
  if (!alive || !response.body) return response;
  const tap = new TransformStream<Uint8Array, Uint8Array>({
    transform(chunk, controller) {
      alive();
      controller.enqueue(chunk);
    },
  });
  return new Response(response.body.pipeThrough(tap), {
    status: response.status,
    statusText: response.statusText,
    headers: response.headers,
  });
}
