/**
 * A key read with a line break or blanks around it (a Kubernetes secret made from a file
 * ends with one) goes out trimmed — the header is trimmed on its way out — so a server that
 * quotes the key it got quotes it without them. Its error must still be scrubbed, also when
 * the endpoint's `apiKeyEnv` has a name no credential pattern catches (`GW_BEARER`).
 * Local fake providers; the key reaches the workers' routing as config.ts reads it.
 */
import { describe, expect, it } from "vitest";
import type { ModelConfig } from "../src/shared/agent-config.js";
import { loadConfig } from "../src/shared/config.js";
import { REDACTED, scrubSecrets } from "../src/shared/scrub-secrets.js";
import { createModel } from "../src/worker/models/create-model.js";
import type { ModelRequest } from "../src/worker/models/provider.js";
import { useFakeProviders } from "./support/fake-providers.js";

const KEY = "gw-live-0123456789abcdef";

function request(): ModelRequest {
  return {
    sessionId: "s",
    system: "",
    history: [{ role: "user", content: "hi" }],
    tools: [],
    signal: new AbortController().signal,
  } as unknown as ModelRequest;
}

async function failure(model: ModelConfig, env: Record<string, string>): Promise<string> {
  const routing = loadConfig(env).models;
  const provider = createModel(model, { faults: { increment: async () => 1 }, routing });
  try {
    for await (const _ of provider.stream(request()));
  } catch (error) {
    return (error as Error).message;
  }
  throw new Error("expected the request to fail");
}

const fakes = useFakeProviders();

describe("a key padded with blanks is scrubbed as it was sent", () => {
  for (const padded of [`${KEY}\n`, ` ${KEY}\r\n`]) {
    it(`openai: a 401 quoting the key ${JSON.stringify(padded)} (trimmed) is scrubbed`, async () => {
      fakes.chat.enqueue({
        status: 401,
        errorMessage: `Incorrect API key provided: ${KEY}. Check your gateway key.`,
        errorCode: "invalid_api_key",
      });
      const message = await failure(
        { provider: "openai", model: "m", endpoint: "gw" },
        {
          GW_BEARER: padded,
          FLEET_MODEL_ENDPOINTS: JSON.stringify({
            gw: { provider: "openai", baseUrl: fakes.chat.url, apiKeyEnv: "GW_BEARER" },
          }),
        },
      );
      expect(fakes.chat.requests.at(-1)!.headers.authorization).toContain(KEY); // it was sent
      expect(message).toContain("Incorrect API key provided");
      expect(message).not.toContain(KEY);
    });

    it(`anthropic: a 401 quoting the key ${JSON.stringify(padded)} (trimmed) is scrubbed`, async () => {
      fakes.anthropic.script({
        status: 401,
        error: { type: "authentication_error", message: `invalid key ${KEY} for this workspace` },
      });
      const message = await failure(
        { provider: "anthropic", model: "m", endpoint: "gw" },
        {
          GW_BEARER: padded,
          FLEET_MODEL_ENDPOINTS: JSON.stringify({
            gw: { provider: "anthropic", baseUrl: fakes.anthropic.url, apiKeyEnv: "GW_BEARER" },
          }),
        },
      );
      expect(message).toContain("authentication_error");
      expect(message).not.toContain(KEY);
    });
  }

  it("scrubSecrets takes each given value without its surrounding blanks", () => {
    expect(scrubSecrets(`got ${KEY}.`, [`${KEY}\n`])).toBe(`got ${REDACTED}.`);
    expect(scrubSecrets("short ok", ["  ok  \n"])).toBe("short ok");
  });
});
