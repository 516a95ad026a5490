/**
 * Chat completion deltas whose `content` is a list of parts, not a string: Mistral's
 * reasoning models (magistral, and others with `reasoning_effort`) stream their thinking as
 * `[{"type":"thinking","thinking":[{"type":"text","text":…}]}]` and then their answer as
 * `[{"type":"text","text":…}]` (docs.mistral.ai/capabilities/reasoning). The answer's text is
 * the step's text; the thinking is not kept, like the `reasoning_content` other servers
 * stream, but counts as output arriving (the output bound, the idle limit). Before, every
 * delta whose content was not a string was passed over: the step was stored `end_turn` with
 * no text at all, the session completed, the model's whole answer lost.
 * Through the real SDK and the fake server.
 */
import { expect, it } from "vitest";
import { callModel } from "../src/worker/call-model.js";
import { useFakeProviders } from "./support/fake-providers.js";
import { gpt, noSleep, req, step } from "./support/model-steps.js";

const fakes = useFakeProviders();
const history = [{ role: "user" as const, content: "hi" }];
const thinking = (text: string) => ({ content: [{ type: "thinking", thinking: [{ type: "text", text }] }] });
const answer = (text: string) => ({ content: [{ type: "text", text }] });

it("the text parts are the step's text; the thinking parts are not kept", async () => {
  fakes.chat.enqueue({
    deltas: [thinking("The user greets; "), thinking("I greet back."), answer("Hello"), answer(" there")],
  });
  const message = await step(gpt("chat", fakes.chat.url), history);
  expect(message).toMatchObject({ content: "Hello there", stopReason: "end_turn" });
});

it("thinking parts count toward the output bound as they arrive", async () => {
  fakes.chat.enqueue({ deltas: [thinking("t".repeat(3_000)), answer("late")] });
  const result = await callModel(gpt("chat", fakes.chat.url), req(history), {
    sleep: noSleep,
    policy: { maxAttempts: 1, baseDelayMs: 1, maxDelayMs: 1, maxOutputChars: 1_000 },
  });
  expect(result).toMatchObject({ ok: true, message: { content: "", stopReason: "interrupted" } });
});
