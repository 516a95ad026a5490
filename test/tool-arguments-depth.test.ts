/**
 * A model's tool call whose arguments nest 100,000 levels deep (what the model streams; the
 * API refuses such nesting in what users send, request-checks.ts) is kept as a call with its
 * arguments text under `_raw`, as arguments that are not a JSON object are: the tool answers
 * that its arguments are invalid and the model sees why. Before, the parsed value went on to
 * the recursive walks after it (JSON.stringify, sanitizeJson), whose stack overflow
 * (RangeError) was caught as if the stream had broken: the step was stored `interrupted` with
 * the call dropped and the reason lost, and every resume asked the same again until the
 * session was parked. Nesting a tool may use (up to MAX_TOOL_ARGUMENT_DEPTH) is parsed as before.
 */
import { describe, expect, it } from "vitest";
import { callModel } from "../src/worker/call-model.js";
import { MAX_TOOL_ARGUMENT_DEPTH } from "../src/worker/models/openai-tool-calls.js";
import { useFakeProviders } from "./support/fake-providers.js";
import { claudeAt, gpt, noSleep, req } from "./support/model-steps.js";

const nested = (depth: number) => `{"a":${"[".repeat(depth - 1)}${"]".repeat(depth - 1)}}`;
const DEEP = nested(100_000);
const OK = nested(MAX_TOOL_ARGUMENT_DEPTH);

const fakes = useFakeProviders();

const once = { sleep: noSleep, policy: { maxAttempts: 1, baseDelayMs: 1, maxDelayMs: 1 } };

describe("a tool call's arguments nested 100,000 levels deep", () => {
  it("openai: the call is kept, its arguments under _raw; nesting up to the bound is parsed", async () => {
    fakes.chat.enqueue(
      { toolCalls: [{ id: "call_1", name: "fail", arguments: DEEP }] },
      { toolCalls: [{ id: "call_2", name: "fail", arguments: OK }] },
    );
    const deep = await callModel(gpt("chat", fakes.chat.url), req([{ role: "user", content: "go" }]), once);
    expect(deep).toMatchObject({
      ok: true,
      message: {
        stopReason: "tool_use",
        toolCalls: [{ id: "call_1", name: "fail", arguments: { _raw: DEEP } }],
      },
    });
    const ok = await callModel(gpt("chat", fakes.chat.url), req([{ role: "user", content: "go" }]), once);
    expect(ok).toMatchObject({ ok: true, message: { toolCalls: [{ arguments: JSON.parse(OK) }] } });
  });

  it("anthropic: the same", async () => {
    fakes.anthropic.script({
      blocks: [{ type: "tool_use", id: "toolu_1", name: "fail", input: {}, jsonChunks: [DEEP] }],
      stopReason: "tool_use",
    });
    const deep = await callModel(claudeAt(fakes.anthropic.url), req([{ role: "user", content: "go" }]), once);
    expect(deep).toMatchObject({
      ok: true,
      message: { stopReason: "tool_use", toolCalls: [{ id: "toolu_1", arguments: { _raw: DEEP } }] },
    });
  });
});
