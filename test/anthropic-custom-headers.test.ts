/**
 * ANTHROPIC_CUSTOM_HEADERS, which the SDK reads by itself in its constructor, is neutralised
 * (transport.ts): none of its values is sent. A header it names that the SDK sends itself must
 * still go as the SDK sends it: `anthropic-version`, which the API requires, was removed with
 * it, so every request of the worker went without it. Real SDK, real HTTP
 * (test/support/fake-anthropic.ts records the headers).
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { callModel } from "../src/worker/call-model.js";
import { AnthropicModel } from "../src/worker/models/anthropic.js";
import type { ProviderKey } from "../src/worker/models/provider.js";
import { type FakeAnthropic, startFakeAnthropic } from "./support/fake-anthropic.js";
import { sayHi } from "./support/model-steps.js";

const KEY = "sk-ant-route-key-0123456789";
const ENV_VALUE = "env-custom-header-value-0001";

let fake: FakeAnthropic;
beforeAll(async () => {
  fake = await startFakeAnthropic();
});
afterAll(async () => fake?.close());
afterEach(() => {
  delete process.env.ANTHROPIC_CUSTOM_HEADERS;
  fake.requests.length = 0;
});

async function headersSent(key: ProviderKey) {
  fake.requests.length = 0;
  fake.script({ blocks: [{ type: "text", text: "ok" }] });
  const model = new AnthropicModel({ provider: "anthropic", model: "claude-test", baseUrl: fake.url }, key);
  const result = await callModel(model, sayHi(), { sleep: async () => {} });
  expect(result.ok).toBe(true);
  return fake.requests[0]!.headers;
}

describe("ANTHROPIC_CUSTOM_HEADERS naming headers the SDK sends itself", () => {
  for (const [name, key] of [
    ["a keyed route", { apiKey: KEY }],
    ["a keyless route", { keyless: true }],
  ] as const) {
    it(`${name}: the SDK's own anthropic-version, accept and key go as without the variable; its values go nowhere`, async () => {
      const own = await headersSent(key);
      process.env.ANTHROPIC_CUSTOM_HEADERS = [
        `anthropic-version: ${ENV_VALUE}`,
        `Accept: ${ENV_VALUE}`,
        `Authorization: Bearer ${ENV_VALUE}`,
        `X-Env-Secret: ${ENV_VALUE}`,
      ].join("\n");
      const headers = await headersSent(key);
      expect(headers["anthropic-version"]).toBe(own["anthropic-version"]);
      expect(headers.accept).toBe(own.accept);
      expect(headers.authorization).toBe(own.authorization);
      expect(headers["x-env-secret"]).toBeUndefined();
      expect(JSON.stringify(headers)).not.toContain(ENV_VALUE);
    });
  }
});
