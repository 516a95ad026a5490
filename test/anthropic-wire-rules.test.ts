/**
 * What the Messages API refuses in a history the fleet builds itself, found by an audit of the
 * Anthropic adapter against fake-anthropic.ts (which refuses it as the API does): each case
 * is a request that, sent once, would be refused at every retry and every resume.
 */
import { describe, expect, it } from "vitest";
import type { Message } from "../src/shared/messages.js";
import { signatureOf } from "./support/fake-anthropic.js";
import { useFakeProviders } from "./support/fake-providers.js";
import { claudeAt, step } from "./support/model-steps.js";

const fakes = useFakeProviders();
const claude = (extra: Record<string, unknown> = {}) => claudeAt(fakes.anthropic.url, extra);

/** A step's provider state from the fake's own endpoint: a signed thinking block, then `rest`. */
const stateWith = (thinking: string, ...rest: Record<string, unknown>[]) => ({
  provider: "anthropic",
  api: "messages",
  target: fakes.anthropic.url,
  content: [{ type: "thinking", thinking, signature: signatureOf(thinking) }, ...rest],
});

/**
 * "find it", then a step paused after thinking `thinking` and writing `text`: its provider
 * state is the signed thinking block, then that text.
 */
const pausedAfterThinking = (thinking: string, text: string): Message[] => [
  { role: "user", content: "find it" },
  {
    role: "assistant",
    content: text,
    stopReason: "paused",
    providerState: stateWith(thinking, { type: "text", text }),
  },
];

describe("a tool whose output is only whitespace", () => {
  it("goes back as a result without content, not as a whitespace text the API refuses", async () => {
    const history: Message[] = [
      { role: "user", content: "touch a" },
      {
        role: "assistant",
        content: "",
        toolCalls: [{ id: "toolu_1", name: "write_file", arguments: { path: "a" } }],
        stopReason: "tool_use",
      },
      // A shell tool's output of one newline; a failed one of a CRLF.
      { role: "tool", toolCallId: "toolu_1", name: "write_file", content: "\n", success: true },
    ];
    fakes.anthropic.script({ blocks: [{ type: "text", text: "Done." }] });
    const answer = await step(claude({ thinking: undefined }), history);
    expect(answer).toMatchObject({ content: "Done.", stopReason: "end_turn" });
    expect(fakes.anthropic.requests[0]!.body.messages[2]).toEqual({
      role: "user",
      content: [{ type: "tool_result", tool_use_id: "toolu_1", cache_control: { type: "ephemeral" } }],
    });

    const failed: Message[] = [
      ...history.slice(0, 2),
      { role: "tool", toolCallId: "toolu_1", name: "write_file", content: "\r\n", success: false },
    ];
    fakes.anthropic.script({ blocks: [{ type: "text", text: "It failed." }] });
    await step(claude({ thinking: undefined }), failed);
    expect(fakes.anthropic.requests[1]!.body.messages[2]!.content).toEqual([
      { type: "tool_result", tool_use_id: "toolu_1", is_error: true, cache_control: { type: "ephemeral" } },
    ]);
  });
});

describe("a thinking block that cannot be stored as it came", () => {
  it("is not kept (its text would change, its signature no longer match): the tool turn goes on without it", async () => {
    // The model thought about a NUL byte: Postgres stores none, so the stored text would be
    // U+FFFD in its place, and the API refuses the changed block back ("Invalid signature").
    const thinking = "The file starts with a \u0000 byte.";
    fakes.anthropic.script(
      {
        blocks: [
          { type: "thinking", thinking },
          { type: "tool_use", id: "toolu_1", name: "write_file", input: { path: "a" } },
        ],
        stopReason: "tool_use",
      },
      { blocks: [{ type: "text", text: "Wrote a." }] },
    );
    const history: Message[] = [{ role: "user", content: "write a" }];
    const first = await step(claude(), history);
    expect(first.stopReason).toBe("tool_use");
    expect(first.providerState).toBeUndefined();
    history.push(first, {
      role: "tool",
      toolCallId: "toolu_1",
      name: "write_file",
      content: "ok",
      success: true,
    });
    const second = await step(claude(), history);
    expect(second).toMatchObject({ content: "Wrote a.", stopReason: "end_turn" });
    const replayed = fakes.anthropic.requests[1]!.body;
    expect(JSON.stringify(replayed.messages)).not.toContain('"thinking"');
    expect(replayed).not.toHaveProperty("thinking");
  });
});

describe("consecutive paused steps, one assistant turn", () => {
  it("a later step's thinking is not sent after an earlier step's text (the API wants thinking first)", async () => {
    // Adaptive thinking: the model paused without thinking, then thought in the continuation
    // and asked for a tool. The two steps are one assistant turn on the wire.
    const thinking = "Now the tool.";
    const history: Message[] = [
      { role: "user", content: "find it" },
      { role: "assistant", content: "Searching.", stopReason: "paused" },
      {
        role: "assistant",
        content: "",
        toolCalls: [{ id: "toolu_1", name: "write_file", arguments: { path: "a" } }],
        stopReason: "tool_use",
        providerState: stateWith(thinking, { type: "tool_use", id: "toolu_1", name: "write_file" }),
      },
      { role: "tool", toolCallId: "toolu_1", name: "write_file", content: "ok", success: true },
    ];
    fakes.anthropic.script({ blocks: [{ type: "text", text: "Found." }] });
    const answer = await step(claude({ thinking: { type: "adaptive" } }), history);
    expect(answer).toMatchObject({ content: "Found.", stopReason: "end_turn" });
    expect(fakes.anthropic.requests[0]!.body.messages[1]).toEqual({
      role: "assistant",
      content: [
        { type: "text", text: "Searching." },
        { type: "tool_use", id: "toolu_1", name: "write_file", input: { path: "a" } },
      ],
    });
  });
});

describe("a paused step that ends with its thinking", () => {
  it("is not sent as a final assistant turn ending with a thinking block", async () => {
    // Paused right after thinking: its only text is the "\n\n" before a block never sent.
    const history = pausedAfterThinking("Let me look.", "\n\n");
    fakes.anthropic.script({ blocks: [{ type: "text", text: "Found." }] });
    const answer = await step(claude(), history);
    expect(answer).toMatchObject({ content: "Found.", stopReason: "end_turn" });
    expect(fakes.anthropic.requests[0]!.body.messages.map((m) => m.role)).toEqual(["user"]);
  });
});

describe("a paused step without thinking, continued with thinking on", () => {
  it("is continued without thinking, which the API requires of a final assistant turn not starting with it", async () => {
    // Paused by the primary; the resume runs on a model at another endpoint (its state does
    // not go there), or adaptive thinking skipped it: the turn starts with text.
    const history: Message[] = [
      { role: "user", content: "find it" },
      { role: "assistant", content: "Searching.", stopReason: "paused" },
    ];
    for (const thinking of [{ type: "enabled", budgetTokens: 2048 }, { type: "adaptive" }]) {
      fakes.anthropic.requests.length = 0;
      fakes.anthropic.script({ blocks: [{ type: "text", text: " Found." }] });
      const answer = await step(claude({ thinking }), history);
      expect(answer).toMatchObject({ content: " Found.", stopReason: "end_turn" });
      expect(fakes.anthropic.requests[0]!.body).not.toHaveProperty("thinking");
    }
  });
});

describe("a paused step with thinking, continued by a model without it", () => {
  it("goes without its thinking blocks, which the API refuses in a final assistant turn with thinking off", async () => {
    // Paused by the primary (thinking on); the resume runs on a fallback at the same endpoint
    // that has no thinking: the state is replayed there (same target).
    const history = pausedAfterThinking("Let me look.", "Searching.");
    fakes.anthropic.script({ blocks: [{ type: "text", text: " Found." }] });
    const answer = await step(claude({ thinking: undefined }), history);
    expect(answer).toMatchObject({ content: " Found.", stopReason: "end_turn" });
    expect(fakes.anthropic.requests[0]!.body.messages[1]).toEqual({
      role: "assistant",
      content: [{ type: "text", text: "Searching." }],
    });
  });
});

describe("a tool loop whose later step did not think", () => {
  // Without interleaved thinking the model thinks once, at the start of its turn, and its
  // steps after tool results start with text or tool_use; with adaptive thinking it may skip
  // a step's thinking. The turn (tool loop included) still starts with the first step's
  // thinking block, which is what the API asks of it: the next step keeps `thinking`.
  it.each([{ type: "enabled", budgetTokens: 2048 }, { type: "adaptive" }])(
    "the next request keeps thinking %o, and the first step's signed block",
    async (thinking) => {
      const think = "Write a, then b.";
      fakes.anthropic.script(
        {
          blocks: [
            { type: "thinking", thinking: think },
            { type: "tool_use", id: "toolu_a", name: "write_file", input: { path: "a" } },
          ],
          stopReason: "tool_use",
        },
        {
          blocks: [{ type: "tool_use", id: "toolu_b", name: "write_file", input: { path: "b" } }],
          stopReason: "tool_use",
        },
        { blocks: [{ type: "text", text: "Wrote both." }] },
      );
      const model = claude({ thinking });
      const history: Message[] = [{ role: "user", content: "write a and b" }];
      for (const id of ["toolu_a", "toolu_b"]) {
        const asked = await step(model, history);
        expect(asked.stopReason).toBe("tool_use");
        history.push(asked, {
          role: "tool",
          toolCallId: id,
          name: "write_file",
          content: "ok",
          success: true,
        });
      }
      expect(await step(model, history)).toMatchObject({ content: "Wrote both.", stopReason: "end_turn" });
      const [, second, third] = fakes.anthropic.requests.map((r) => r.body);
      for (const body of [second!, third!]) {
        expect(body.thinking).toEqual(
          thinking.type === "enabled" ? { type: "enabled", budget_tokens: 2048 } : { type: "adaptive" },
        );
        expect((body.messages[1] as { content: unknown[] }).content[0]).toEqual({
          type: "thinking",
          thinking: think,
          signature: signatureOf(think),
        });
      }
    },
  );
});
