import { describe, expect, it } from "vitest";
import { parseBatchEntries } from "../src/producer/batch-entries.js";
import { ValidationError } from "../src/shared/errors.js";
import { EMPTY_ROUTING } from "../src/shared/model-endpoints.js";

const agent = (text: string) => ({ model: { provider: "scripted" as const, steps: [{ text }] } });

describe("a batch's agents", () => {
  it("parses equal agents once: the entries share one frozen parse, each stored as given", async () => {
    const items = await parseBatchEntries(
      "t1",
      [
        { agent: agent("same"), metadata: undefined, input: "a" },
        { agent: JSON.parse(JSON.stringify(agent("same"))), metadata: undefined, input: "b" },
        { agent: agent("other"), metadata: undefined, input: "c" },
      ],
      EMPTY_ROUTING,
    );
    expect(items.map((item) => item.input)).toEqual(["a", "b", "c"]);
    expect(items[1]!.agent).toBe(items[0]!.agent);
    expect(items[2]!.agent).not.toBe(items[0]!.agent);
    expect(Object.isFrozen(items[0]!.agent.model)).toBe(true);
    expect(items[2]!.agent.model).toEqual({ provider: "scripted", steps: [{ text: "other" }] });
    expect(items[0]!.agent.maxTurns).toBe(20);
  });

  it("names the first entry whose agent does not parse, also when an equal one came before it parsed", async () => {
    const bad = { model: { provider: "nope" } };
    const failing = (entries: { agent: unknown; input: string }[]) =>
      parseBatchEntries("t1", entries as never, EMPTY_ROUTING).then(
        () => null,
        (error: unknown) => error,
      );
    const second = await failing([
      { agent: agent("fine"), input: "a" },
      { agent: bad, input: "b" },
      { agent: bad, input: "c" },
    ]);
    expect(second).toBeInstanceOf(ValidationError);
    expect((second as ValidationError).field).toBe("sessions[1].agent.model.provider");
    const first = await failing([
      { agent: bad, input: "a" },
      { agent: agent("fine"), input: "b" },
    ]);
    expect((first as ValidationError).field).toBe("sessions[0].agent.model.provider");
  });
});
