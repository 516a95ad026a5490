/**
 * An agent (or a resume's MODEL) whose scripted steps or fallback models fail is refused at
 * the first one that fails: the items after it are not parsed. zod's arrays parse every item
 * and keep an issue for each that fails, so a body of many bad items made as many issues: a
 * 2 MB body of 1,000 steps each asking 1,000 tool calls of `0` made a million, ~25 s of the
 * API's one event loop and ~1 GB to answer one 400; 16 MB of `"steps": [0, 0, …]` held the API
 * 264 s and 4.1 GB (measured on `fleet api`, this 2-core box). Any key could send it, and
 * bodies under 1 MiB are not held to FLEET_API_MAX_BIG_BODIES. The 400 names the same field
 * as before.
 */
import { describe, expect, it } from "vitest";
import {
  agentConfigSchema,
  MAX_FALLBACK_MODELS,
  parseAgentConfig,
  parseModelConfig,
} from "../src/shared/agent-config.js";
import { holdsAtMost, parsedWholeWhenSmall, WHOLE_PARSE_NODES } from "../src/shared/first-failure.js";
import { keyedApiForFile } from "./support/answer.js";

/** `n` items, each failing on its own; `reads.n` counts how often a parse looked into one. */
function badItems(n: number, key: string, reads: { n: number }): unknown[] {
  return Array.from({ length: n }, () =>
    Object.defineProperty({}, key, {
      enumerable: true,
      get() {
        reads.n++;
        return null;
      },
    }),
  );
}

const N = 1_000;

describe("parsing an agent stops at the first scripted step or fallback model that fails", () => {
  it("steps after the first bad one are not read; the 400 names the first", () => {
    const reads = { n: 0 };
    const agent = { model: { provider: "scripted", steps: badItems(N, "text", reads) } };
    expect(() => parseAgentConfig(agent)).toThrow(/^agent\.model\.steps\[0\]\.text: expected string/);
    expect(reads.n).toBeLessThan(10);
  });

  it("fallback models after the first bad one are not read, nor the steps of a bad one's", () => {
    const reads = { n: 0 };
    const scripted = { provider: "scripted", steps: [{}] };
    const fallbacks = { model: scripted, fallbackModels: badItems(MAX_FALLBACK_MODELS, "provider", reads) };
    expect(() => parseAgentConfig(fallbacks)).toThrow(
      /^agent\.fallbackModels\[0\]\.provider: must be one of/,
    );
    expect(reads.n).toBeLessThan(10);
    const steps = { n: 0 };
    const fallbackSteps = {
      model: scripted,
      fallbackModels: [scripted, { provider: "scripted", steps: badItems(N, "stopReason", steps) }],
    };
    expect(() => parseAgentConfig(fallbackSteps)).toThrow(
      /^agent\.fallbackModels\[1\]\.steps\[0\]\.stopReason: expected string/,
    );
    expect(steps.n).toBeLessThan(10);
  });

  it("a resume's MODEL too", () => {
    const reads = { n: 0 };
    expect(() => parseModelConfig({ provider: "scripted", steps: badItems(N, "delayMs", reads) })).toThrow(
      /^model\.steps\[0\]\.delayMs: expected number/,
    );
    expect(reads.n).toBeLessThan(10);
  });

  it("a valid agent parses as before, and a bad step after good ones is named", () => {
    const agent = parseAgentConfig({
      model: { provider: "scripted", steps: [{ text: "a" }, { text: "b\u0000" }] },
      fallbackModels: [{ provider: "scripted", steps: [{}] }],
    });
    expect(agent.model).toEqual({ provider: "scripted", steps: [{ text: "a" }, { text: "b\uFFFD" }] });
    expect(agent.fallbackModels).toEqual([{ provider: "scripted", steps: [{}] }]);
    const late = { model: { provider: "scripted", steps: [{}, {}, { text: 1 }, { text: 2 }] } };
    expect(() => parseAgentConfig(late)).toThrow(/^agent\.model\.steps\[2\]\.text: expected string/);
    // A step of a newer release (an unknown field) is still told apart from a broken one.
    const newer = { model: { provider: "scripted", steps: [{}, { later: true }, { text: 2 }] } };
    expect(() => parseAgentConfig(newer)).toThrow(/^agent\.model\.steps\[1\]\.later: unknown field$/);
  });
});

describe("a small agent is parsed whole, once", () => {
  it("counts keys and items at every level, and stops reading past the bound", () => {
    expect(holdsAtMost({ a: [1, { b: 2 }], c: "x" }, 5)).toBe(true);
    expect(holdsAtMost({ a: [1, { b: 2 }], c: "x" }, 4)).toBe(false);
    expect(holdsAtMost("text", 0)).toBe(true);
    const reads = { n: 0 };
    expect(holdsAtMost({ steps: badItems(N, "text", reads) }, WHOLE_PARSE_NODES)).toBe(false);
    expect(reads.n).toBe(0);
    // Nesting counts too: a deep one is not walked to its bottom.
    let deep: unknown[] = [];
    for (let i = 0; i < 100_000; i++) deep = [deep];
    expect(holdsAtMost(deep, WHOLE_PARSE_NODES)).toBe(false);
  });

  it("gives what the first failure's cut gives, and leaves a failure to it", () => {
    const valid = {
      model: {
        provider: "scripted",
        steps: [{ toolCalls: [{ name: "t", arguments: { a: 1 } }] }, { text: "ok" }],
      },
      tools: ["t"],
    };
    const whole = parsedWholeWhenSmall(agentConfigSchema, valid);
    expect(whole).not.toBeNull();
    expect(whole).toEqual(parseAgentConfig(valid));
    // A failing one is not answered here: the cut parses it again and names its first issue.
    const bad = { model: { provider: "scripted", steps: [{}, { text: 1 }, { later: true }] } };
    expect(parsedWholeWhenSmall(agentConfigSchema, bad)).toBeNull();
    expect(() => parseAgentConfig(bad)).toThrow(/^agent\.model\.steps\[1\]\.text: expected string/);
    // Past the bound, not parsed here at all: the cut stops at the first bad step.
    const many = {
      model: { provider: "scripted", steps: Array.from({ length: WHOLE_PARSE_NODES }, () => ({})) },
    };
    expect(parsedWholeWhenSmall(agentConfigSchema, many)).toBeNull();
    expect(parseAgentConfig(many).model).toEqual(many.model);
  });
});

describe("through the API", () => {
  const api = keyedApiForFile("agentparsefirst", {});
  /** 200 steps of 1,000 tool calls each, every call `0` (~400 KB: not a big body). */
  const steps = `[${Array.from({ length: 200 }, () => `{"toolCalls": [${Array(1_000).fill("0").join(",")}]}`).join(",")}]`;
  const model = JSON.parse(`{"provider": "scripted", "steps": ${steps}}`);

  it("a session, a batch and a resume with such steps are 400s naming the first bad call", async () => {
    const session = await api.post("/v1/sessions", { agent: { model } });
    expect(session.status, session.text).toBe(400);
    expect(session.json.error.field).toBe("agent.model.steps[0].toolCalls[0]");
    const batch = await api.post("/v1/batches", {
      sessions: [{ agent: { model: { provider: "scripted", steps: [{}] } } }, { agent: { model } }],
    });
    expect(batch.status, batch.text).toBe(400);
    expect(batch.json.error.field).toBe("sessions[1].agent.model.steps[0].toolCalls[0]");
    const created = await api.post("/v1/sessions", {
      agent: { model: { provider: "scripted", steps: [{}] } },
    });
    expect(created.status, created.text).toBe(201);
    const resume = await api.post(`/v1/sessions/${created.json.id}/resume`, { model });
    expect(resume.status, resume.text).toBe(400);
    expect(resume.json.error.field).toBe("model.steps[0].toolCalls[0]");
  });
});
