/**
 * A provider's error answer with a body of megabytes (a proxy's error page, a server's dump):
 * the SDKs quote the body whole in their error, which became the run's stored error, its log
 * line and, for a refusal, the session's `provider_rejected: …` parked reason — 8 MB each, at
 * every attempt. Now the message is cut at MAX_ERROR_CHARS after its keys are scrubbed, saying
 * how long it was. Real HTTP server, real OpenAI and Anthropic SDKs.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MAX_ERROR_CHARS } from "../src/shared/failure-text.js";
import { AnthropicModel } from "../src/worker/models/anthropic.js";
import { OpenAIModel } from "../src/worker/models/openai.js";
import { type ModelProvider, ProviderError } from "../src/worker/models/provider.js";
import { sayHi } from "./support/model-steps.js";

const BODY = JSON.stringify({ error: { type: "invalid_request_error", message: "E".repeat(8 << 20) } });

async function failure(model: ModelProvider): Promise<ProviderError> {
  try {
    for await (const _ of model.stream(sayHi()));
  } catch (error) {
    expect(error).toBeInstanceOf(ProviderError);
    return error as ProviderError;
  }
  throw new Error("the request did not fail");
}

describe("a provider error with a body of 8 MB", () => {
  let server: Server;
  let url: string;
  beforeAll(async () => {
    server = createServer((req, res) => {
      req.resume();
      req.on("end", () => {
        res.writeHead(400, { "content-type": "application/json" });
        res.end(BODY);
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => server?.close());

  it.each(["openai", "anthropic"] as const)(
    "%s: the error's message is cut, saying how long it was",
    async (provider) => {
      const model =
        provider === "openai"
          ? new OpenAIModel({ provider, model: "m", baseUrl: `${url}/v1` }, { apiKey: "sk-test" })
          : new AnthropicModel({ provider, model: "m", baseUrl: url, maxTokens: 100 } as never, {
              apiKey: "sk-ant",
            });
      const error = await failure(model);
      expect(error.retryable).toBe(false);
      expect(error.message.length).toBeLessThanOrEqual(MAX_ERROR_CHARS + 40);
      expect(error.message).toMatch(/EEEE… \(\d+ characters in all\)$/);
    },
    60_000,
  );
});
