/**
 * The three fake provider servers (Anthropic Messages, OpenAI Responses, OpenAI chat), started
 * once for a test file and their recorded requests cleared before each test. Call at the top
 * level of the file: `const fakes = useFakeProviders();`, then `fakes.anthropic.url` in tests.
 */
import { afterAll, beforeAll, beforeEach } from "vitest";
import { type FakeAnthropic, startFakeAnthropic } from "./fake-anthropic.js";
import { type FakeOpenAI, startFakeOpenAI } from "./fake-openai.js";
import { type FakeResponses, startFakeResponses } from "./fake-openai-responses.js";

export type FakeProviders = { anthropic: FakeAnthropic; responses: FakeResponses; chat: FakeOpenAI };

export function useFakeProviders(): FakeProviders {
  const fakes = {} as FakeProviders;
  beforeAll(async () => {
    [fakes.anthropic, fakes.responses, fakes.chat] = await Promise.all([
      startFakeAnthropic(),
      startFakeResponses(),
      startFakeOpenAI(),
    ]);
  });
  afterAll(async () => {
    await Promise.all([fakes.anthropic?.close(), fakes.responses?.close(), fakes.chat?.close()]);
  });
  beforeEach(() => {
    fakes.anthropic.requests.length = 0;
    fakes.responses.requests.length = 0;
    fakes.chat.requests.length = 0;
  });
  return fakes;
}
