/**
 * A stream that keeps sending `ping` events is not idle. Recent Claude models think without
 * streaming their thinking by default (`thinking.display: "omitted"`): the thinking block
 * opens, the API sends pings for as long as the model thinks, then the block's signature and
 * the answer come. Before, the pings did not count as signs of life, so a model that thought
 * for longer than the idle limit (120 s; FLEET_MODEL_STEP_TIMEOUT_MS still bounds the step)
 * was cut as "the model sent nothing", its request billed and asked again, thinking as long
 * each time. Through the real SDK and the fake server; a short idle limit stands for 120 s.
 */
import { expect, it } from "vitest";
import { callModel } from "../src/worker/call-model.js";
import { useFakeProviders } from "./support/fake-providers.js";
import { claudeAt, gpt, noSleep, req } from "./support/model-steps.js";

const fakes = useFakeProviders();
const IDLE_MS = 800;

it("Anthropic: a model thinking longer than the idle limit, the API pinging meanwhile, is not cut", async () => {
  fakes.anthropic.script({
    blocks: [
      { type: "thinking", thinking: "" },
      { type: "text", text: "the answer" },
    ],
    thinkingMs: IDLE_MS * 4,
    pingEveryMs: IDLE_MS / 8,
  });
  const step = await callModel(claudeAt(fakes.anthropic.url), req([{ role: "user", content: "think" }]), {
    sleep: noSleep,
    policy: { maxAttempts: 1, baseDelayMs: 1, maxDelayMs: 1, idleTimeoutMs: IDLE_MS },
  });
  expect(step).toMatchObject({ ok: true, message: { content: "the answer", stopReason: "end_turn" } });
  expect(fakes.anthropic.requests).toHaveLength(1);
}, 30_000);

it("Anthropic: a stream that sends nothing at all for the idle limit is still cut", async () => {
  fakes.anthropic.script({
    blocks: [
      { type: "thinking", thinking: "" },
      { type: "text", text: "late" },
    ],
    thinkingMs: IDLE_MS * 4,
  });
  const step = await callModel(claudeAt(fakes.anthropic.url), req([{ role: "user", content: "think" }]), {
    sleep: noSleep,
    policy: { maxAttempts: 1, baseDelayMs: 1, maxDelayMs: 1, idleTimeoutMs: IDLE_MS },
  });
  expect(step).toMatchObject({ ok: false, error: `the model sent nothing for ${IDLE_MS} ms` });
}, 30_000);

it("chat completions: keep-alive comments while the model works count as signs of life", async () => {
  fakes.chat.enqueue({ text: ["the", " answer"], chunkDelayMs: IDLE_MS * 2, commentEveryMs: IDLE_MS / 8 });
  const step = await callModel(gpt("chat", fakes.chat.url), req([{ role: "user", content: "think" }]), {
    sleep: noSleep,
    policy: { maxAttempts: 1, baseDelayMs: 1, maxDelayMs: 1, idleTimeoutMs: IDLE_MS },
  });
  expect(step).toMatchObject({ ok: true, message: { content: "the answer", stopReason: "end_turn" } });
}, 30_000);
