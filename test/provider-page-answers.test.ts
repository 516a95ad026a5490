/**
 * A `200` web page (`text/html`) to a streamed request: what a new user's `baseUrl` gets when
 * it names a site rather than its API (a console's address, a path without `/v1`: many sites
 * answer any path with their page). Read as an event stream with no event it was "the stream
 * ended before any output", asked again up to the attempt limit and the run's error said
 * nothing of why. Now it is refused at once, saying what came and what to check. Both
 * providers, real SDKs, a local server that counts the requests.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { callModel } from "../src/worker/call-model.js";
import { AnthropicModel } from "../src/worker/models/anthropic.js";
import { OpenAIModel } from "../src/worker/models/openai.js";
import { type FixedSseServer, startFixedSse } from "./support/fixed-sse-server.js";
import { sayHi } from "./support/model-steps.js";

let site: FixedSseServer;

beforeAll(async () => {
  site = await startFixedSse();
  site.contentType = "text/html; charset=utf-8";
  site.body = "<!doctype html><html><head><title>Console</title></head><body>Sign in</body></html>";
});
afterAll(() => site.close());

const models = {
  openai: () => new OpenAIModel({ provider: "openai", model: "m", baseUrl: site.url }, { apiKey: "k" }),
  responses: () =>
    new OpenAIModel({ provider: "openai", model: "m", baseUrl: site.url, api: "responses" }, { apiKey: "k" }),
  anthropic: () =>
    new AnthropicModel({ provider: "anthropic", model: "m", baseUrl: site.url }, { apiKey: "k" }),
};

describe.each(Object.keys(models) as (keyof typeof models)[])("%s: a 200 web page", (family) => {
  it("is refused at once, saying what came", async () => {
    site.requests = 0;
    const result = await callModel(models[family](), sayHi(), { sleep: async () => {} });
    expect(result).toMatchObject({ ok: false, rejected: true, attempts: 1 });
    expect(!result.ok && result.error).toContain("a web page (text/html)");
    expect(site.requests).toBe(1);
  });
});
