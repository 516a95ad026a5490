/**
 * What the OpenAI APIs (chat completions, Responses) refuse in a history the fleet builds
 * itself, found by an audit of the OpenAI adapters against fake-openai.ts and
 * fake-openai-responses.ts (which refuse it as the APIs do): each case is a request that,
 * sent once, would be refused at every retry and every resume.
 */
import { describe, expect, it } from "vitest";
import type { AssistantMessage, Message } from "../src/shared/messages.js";
import { OpenAIModel } from "../src/worker/models/openai.js";
import { toResponsesInput } from "../src/worker/models/openai-responses-request.js";
import { useFakeProviders } from "./support/fake-providers.js";
import { foreignToolTurn, gpt, step } from "./support/model-steps.js";

const fakes = useFakeProviders();

describe("a tool call id over 64 characters, to the Responses API", () => {
  it("goes out shortened, the same for the call and its result, the same every time", async () => {
    // An MCP-style id another runtime minted (`…_exec-<uuid>`), imported: 93 characters.
    const long = `codex_mcp__hermes-tools__kanban_complete_exec-${"0123456789abcdef".repeat(2)}-0000-0000-000a`;
    expect(long.length).toBeGreaterThan(64);
    fakes.responses.script({ text: ["Done."] });
    const answer = await step(gpt("responses", fakes.responses.url), foreignToolTurn(long));
    expect(answer).toMatchObject({ content: "Done.", stopReason: "end_turn" });
    const input = fakes.responses.requests[0]!.body.input as { call_id?: string }[];
    const id = input[1]!.call_id!;
    expect(id.length).toBeLessThanOrEqual(64);
    expect(input[2]).toMatchObject({ type: "function_call_output", call_id: id });
    expect(toResponsesInput(foreignToolTurn(long))).toEqual(input);
  });

  it("an id of 64 characters goes out unchanged", async () => {
    const id = `call_${"x".repeat(59)}`;
    fakes.responses.script({ text: ["ok"] });
    await step(gpt("responses", fakes.responses.url), foreignToolTurn(id));
    expect(fakes.responses.requests[0]!.body.input[1]).toMatchObject({ type: "function_call", call_id: id });
  });
});

/** The history after a step that called a tool by a name no agent lists, answered as failed. */
function afterBadName(first: AssistantMessage): Message[] {
  const call = first.toolCalls![0]!;
  return [
    { role: "user", content: "write a" },
    first,
    { role: "tool", toolCallId: call.id, name: call.name, content: "unknown tool", success: false },
  ];
}

describe("a tool call whose name OpenAI refuses (outside ^[a-zA-Z0-9_-]{1,64}$)", () => {
  // A compatible server's model (gpt-oss, Kimi) that names a call `functions.write_file`, or
  // leaks its channel marker into the name; or a Claude call with a 100-character name.
  const BAD = ["functions.write_file", "write_file<|channel|>commentary", `t${"x".repeat(99)}`];

  it.each(BAD)("chat: %s goes back renamed, and the session goes on", async (name) => {
    const model = gpt("chat", fakes.chat.url);
    fakes.chat.enqueue({ toolCalls: [{ id: "call_1", name, arguments: '{"path":"a"}' }] });
    const first = await step(model, [{ role: "user", content: "write a" }]);
    expect(first.toolCalls).toMatchObject([{ id: "call_1", name }]);
    fakes.chat.enqueue({ text: ["Sorry."] });
    expect(await step(model, afterBadName(first))).toMatchObject({ content: "Sorry." });
    const sent = fakes.chat.requests[1]!.body.messages[2].tool_calls[0].function.name as string;
    expect(sent).toMatch(/^[a-zA-Z0-9_-]{1,64}$/);
    expect(fakes.chat.requests[1]!.body.messages[3]).toMatchObject({ role: "tool", tool_call_id: "call_1" });
  });

  it.each(BAD)("responses: %s goes back renamed, the same every time", async (name) => {
    const model = gpt("responses", fakes.responses.url);
    fakes.responses.script({ functionCalls: [{ callId: "call_1", name, arguments: '{"path":"a"}' }] });
    const first = await step(model, [{ role: "user", content: "write a" }]);
    fakes.responses.script({ text: ["Sorry."] });
    expect(await step(model, afterBadName(first))).toMatchObject({ content: "Sorry." });
    const input = fakes.responses.requests[1]!.body.input;
    expect(input[1].name).toMatch(/^[a-zA-Z0-9_-]{1,64}$/);
    expect(input[2]).toMatchObject({ type: "function_call_output", call_id: "call_1" });
    expect(toResponsesInput(afterBadName(first))[1]).toMatchObject({ name: input[1].name });
  });

  it("a valid name goes out unchanged", () => {
    const turn = foreignToolTurn("call_1");
    expect(toResponsesInput(turn)[1]).toMatchObject({ name: "write_file" });
  });
});

describe("a step with reasoning, then a model that does not reason on the same endpoint", () => {
  it("gpt-4.1 after o4-mini (a fallback): the history goes without reasoning items, and the session goes on", async () => {
    const at = (model: string) =>
      new OpenAIModel(
        { provider: "openai", model, baseUrl: fakes.responses.url, api: "responses" },
        { keyless: true },
      );
    fakes.responses.script({
      reasoning: true,
      functionCalls: [{ callId: "call_r1", name: "write_file", arguments: '{"path":"a"}' }],
    });
    const first = await step(at("o4-mini"), [{ role: "user", content: "write a" }]);
    expect(first.providerState).toBeDefined();
    const history: Message[] = [
      { role: "user", content: "write a" },
      first,
      { role: "tool", toolCallId: "call_r1", name: "write_file", content: "ok", success: true },
    ];
    fakes.responses.script({ text: ["Done."] });
    expect(await step(at("gpt-4.1"), history)).toMatchObject({ content: "Done.", stopReason: "end_turn" });
    const sent = fakes.responses.requests.at(-1)!.body;
    expect(sent.include).toBeUndefined();
    expect(sent.input).toEqual([
      { role: "user", content: "write a" },
      { type: "function_call", call_id: "call_r1", name: "write_file", arguments: '{"path":"a"}' },
      { type: "function_call_output", call_id: "call_r1", output: "ok" },
    ]);
    // The reasoning model still gets its reasoning back.
    fakes.responses.script({ text: ["Again."] });
    await step(at("o4-mini"), history);
    expect(fakes.responses.requests.at(-1)!.body.input[1]).toMatchObject({ type: "reasoning" });
  });
});
