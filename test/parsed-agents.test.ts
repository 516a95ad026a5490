import { describe, expect, it } from "vitest";
import { ValidationError } from "../src/shared/errors.js";
import { ParsedAgents } from "../src/shared/parsed-agents.js";

const agent = (text: string) => ({ model: { provider: "scripted", steps: [{ text }] }, tools: ["sleep"] });

describe("ParsedAgents", () => {
  it("parses an agent once: equal agents (other objects, same JSON) get the same parse", () => {
    const agents = new ParsedAgents();
    const first = agents.parse(agent("hello"));
    const again = agents.parse(JSON.parse(JSON.stringify(agent("hello"))));
    expect(again).toBe(first);
    expect(first.maxTurns).toBe(20); // the schema's defaults are applied
    expect(agents.parse(agent("other"))).not.toBe(first);
    expect(agents.size).toBe(2);
  });

  it("answers a parse frozen throughout, so that no job can change what the next one runs", () => {
    const parsed = new ParsedAgents().parse(agent("hello"));
    expect(Object.isFrozen(parsed)).toBe(true);
    expect(Object.isFrozen(parsed.tools)).toBe(true);
    expect(Object.isFrozen(parsed.model)).toBe(true);
    expect(() => {
      (parsed.tools as string[]).push("fail");
    }).toThrow(TypeError);
  });

  it("keeps no agent that fails to parse: each job gets its ValidationError", () => {
    const agents = new ParsedAgents();
    const bad = { model: { provider: "scripted", steps: [] }, maxTurns: -1 };
    expect(() => agents.parse(bad)).toThrow(ValidationError);
    expect(() => agents.parse(bad)).toThrow(ValidationError);
    expect(agents.size).toBe(0);
  });

  it("keeps at most `max` agents, dropping the least recently used", () => {
    const agents = new ParsedAgents(2);
    const a = agents.parse(agent("a"));
    agents.parse(agent("b"));
    expect(agents.parse(agent("a"))).toBe(a); // a is now the most recently used
    agents.parse(agent("c")); // drops b
    expect(agents.size).toBe(2);
    expect(agents.parse(agent("a"))).toBe(a);
    const b = agents.parse(agent("b"));
    expect(agents.parse(agent("b"))).toBe(b);
    expect(agents.size).toBe(2);
  });

  it("parses a long agent every time without keeping it", () => {
    const agents = new ParsedAgents(256, 100);
    const long = agent("x".repeat(200));
    const first = agents.parse(long);
    expect(agents.parse(long)).not.toBe(first);
    expect(agents.parse(long)).toEqual(first);
    expect(Object.isFrozen(first)).toBe(true);
    expect(agents.size).toBe(0);
  });
});

describe("ParsedAgents and the field an error names", () => {
  it("names each failing use by its own root, and an equal good agent's parse by none", () => {
    const agents = new ParsedAgents();
    const bad = { model: { provider: "nope" } };
    const fieldOf = (root: string) => {
      try {
        agents.parse(bad, root);
      } catch (error) {
        return (error as ValidationError).field;
      }
      return null;
    };
    expect(fieldOf("sessions[3].agent")).toBe("sessions[3].agent.model.provider");
    expect(fieldOf("sessions[7].agent")).toBe("sessions[7].agent.model.provider");
    const good = agents.parse(agent("fine"), "sessions[0].agent");
    expect(agents.parse(agent("fine"), "sessions[1].agent")).toBe(good);
  });
});
