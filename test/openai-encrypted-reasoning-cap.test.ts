/**
 * The models a worker has learnt refuse encrypted reasoning (openai.ts, asked without
 * `include` from then on) are remembered in a bounded set: model names come from users'
 * agent configs, and each new name refused added one for the life of the worker. Now the
 * least recently used go past MAX_REMEMBERED; the handful a fleet uses stay remembered.
 * Here a model is forgotten after 300 other refused names (asked with `include` again, and
 * again without it in the same attempt), while a model used among them is still remembered.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { OpenAIModel } from "../src/worker/models/openai.js";
import { type FakeResponses, startFakeResponses } from "./support/fake-openai-responses.js";
import { step } from "./support/model-steps.js";

let responses: FakeResponses;
beforeAll(async () => {
  responses = await startFakeResponses();
});
afterAll(() => responses?.close());

/** A model whose name starts `gpt-4`: the fake refuses it encrypted reasoning, as OpenAI does. */
const model = (name: string) =>
  new OpenAIModel(
    { provider: "openai", model: name, baseUrl: responses.url, api: "responses" },
    { keyless: true },
  );

/** The `include` of each request one step of `name` made. */
async function includes(name: string): Promise<unknown[]> {
  responses.requests.length = 0;
  responses.script({ text: ["ok"] });
  await step(model(name), [{ role: "user", content: "hi" }]);
  return responses.requests.map((r) => r.body.include);
}

const ASKED_AND_REFUSED = [["reasoning.encrypted_content"], undefined];

it("forgets the least recently used refused models past its bound, keeps one in use", async () => {
  expect(await includes("gpt-4-cold")).toEqual(ASKED_AND_REFUSED);
  expect(await includes("gpt-4-hot")).toEqual(ASKED_AND_REFUSED);
  expect(await includes("gpt-4-cold")).toEqual([undefined]);
  for (let i = 0; i < 300; i++) {
    expect(await includes(`gpt-4-user-${i}`)).toEqual(ASKED_AND_REFUSED);
    if (i % 10 === 0) expect(await includes("gpt-4-hot")).toEqual([undefined]);
  }
  expect(await includes("gpt-4-hot")).toEqual([undefined]);
  // Forgotten: asked with include once more, then remembered again.
  expect(await includes("gpt-4-cold")).toEqual(ASKED_AND_REFUSED);
  expect(await includes("gpt-4-cold")).toEqual([undefined]);
}, 60_000);
