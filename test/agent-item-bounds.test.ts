/**
 * An agent's scripted steps (at most MAX_SCRIPTED_STEPS) and fallback models (at most
 * MAX_FALLBACK_MODELS) are bounded: more is a 400 naming the list, before any item of it is
 * parsed. Before, a valid agent of any size up to the 16 MiB body was parsed whole on the
 * API's one event loop: 16.7 MB of 450,000 fallback models took 6.8 s to parse, and 15 MB of
 * 5,000,000 empty steps held `fleet api` ~35 s, its insert answered `503 unavailable` (its
 * connection taken for lost after 15 s without an answer). Each such agent is parsed again by
 * the worker that runs it.
 */
import { describe, expect, it } from "vitest";
import { MAX_FALLBACK_MODELS, MAX_SCRIPTED_STEPS, parseAgentConfig } from "../src/shared/agent-config.js";
import { keyedApiForFile } from "./support/answer.js";

const scripted = (steps: number) => ({
  provider: "scripted",
  steps: Array.from({ length: steps }, () => ({})),
});

describe("the bounds of an agent's lists", () => {
  it("steps and fallback models up to the bound are taken, one more is named", () => {
    expect(parseAgentConfig({ model: scripted(MAX_SCRIPTED_STEPS) }).model).toMatchObject({
      steps: { length: MAX_SCRIPTED_STEPS },
    });
    expect(() => parseAgentConfig({ model: scripted(MAX_SCRIPTED_STEPS + 1) })).toThrow(
      /^agent\.model\.steps: has more than 10,000 steps/,
    );
    const fallbacks = (n: number) => ({
      model: scripted(1),
      fallbackModels: Array.from({ length: n }, () => scripted(1)),
    });
    expect(parseAgentConfig(fallbacks(MAX_FALLBACK_MODELS)).fallbackModels).toHaveLength(MAX_FALLBACK_MODELS);
    expect(() => parseAgentConfig(fallbacks(MAX_FALLBACK_MODELS + 1))).toThrow(
      /^agent\.fallbackModels: lists more than 100 fallback models/,
    );
    expect(() =>
      parseAgentConfig({ model: scripted(1), fallbackModels: [scripted(MAX_SCRIPTED_STEPS + 1)] }),
    ).toThrow(/^agent\.fallbackModels\[0\]\.steps: has more than/);
    // A list past its bound is refused as such, without a look into any of its items.
    let reads = 0;
    const counted = () =>
      Object.defineProperty({}, "text", {
        enumerable: true,
        get() {
          reads++;
          return null;
        },
      });
    const long = { provider: "scripted", steps: Array.from({ length: MAX_SCRIPTED_STEPS + 1 }, counted) };
    expect(() => parseAgentConfig({ model: long })).toThrow(/^agent\.model\.steps: has more than/);
    expect(() => parseAgentConfig({ model: scripted(1), fallbackModels: [long] })).toThrow(
      /^agent\.fallbackModels\[0\]\.steps: has more than/,
    );
    expect(reads).toBe(0);
  });
});

describe("through the API", () => {
  const api = keyedApiForFile("agentitembounds", {});

  it("a session, a batch and a resume past a bound are 400s naming the list", async () => {
    const session = await api.post("/v1/sessions", { agent: { model: scripted(MAX_SCRIPTED_STEPS + 1) } });
    expect(session.status, session.text).toBe(400);
    expect(session.json.error.field).toBe("agent.model.steps");
    const fallbacks = Array.from({ length: MAX_FALLBACK_MODELS + 1 }, () => scripted(1));
    const batch = await api.post("/v1/batches", {
      sessions: [{ agent: { model: scripted(1), fallbackModels: fallbacks } }],
    });
    expect(batch.status, batch.text).toBe(400);
    expect(batch.json.error.field).toBe("sessions[0].agent.fallbackModels");
    const created = await api.post("/v1/sessions", { agent: { model: scripted(MAX_SCRIPTED_STEPS) } });
    expect(created.status, created.text).toBe(201);
    const resume = await api.post(`/v1/sessions/${created.json.id}/resume`, {
      model: scripted(MAX_SCRIPTED_STEPS + 1),
    });
    expect(resume.status, resume.text).toBe(400);
    expect(resume.json.error.field).toBe("model.steps");
  });
});
