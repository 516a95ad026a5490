/**
 * A 400 says what a field must be in words, not in zod's ("Too small: expected number to be
 * >0", "expected int, received number", "Invalid option: expected one of "a"|"b""), and names
 * the rule the field has: `agent.budget.maxTokens` of -2^63 read "Too small: expected int to be
 * >=-9007199254740991", a bound that says nothing of the field (it must be greater than 0).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const MODEL = { provider: "scripted", steps: [{ text: "ok" }] };

describe("a 400's words for a field out of its range", () => {
  let fleet: FleetEnv;
  let base: string;
  let session: string;

  const call = async (method: string, path: string, body?: unknown) => {
    const response = await fetch(`${base}${path}`, {
      method,
      headers: body === undefined ? {} : { "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(10_000),
    });
    return {
      status: response.status,
      json: (await response.json()) as { id: string; error: { message: string } },
    };
  };

  beforeAll(async () => {
    fleet = await createFleetEnv("validation-words");
    base = (await fleet.startApi()).api.url;
    session = (await call("POST", "/v1/sessions", { agent: { model: MODEL } })).json.id;
  }, 60_000);
  afterAll(() => fleet?.close());

  it("says the field's own rule, in words", async () => {
    const agent = (extra: object) => ({ agent: { model: MODEL, ...extra } });
    const cases: [string, string, unknown, string][] = [
      [
        "POST",
        "/v1/sessions",
        agent({ budget: { maxTokens: -(2 ** 63) } }),
        "agent.budget.maxTokens: must be greater than 0",
      ],
      [
        "POST",
        "/v1/sessions",
        agent({ budget: { maxTokens: 0 } }),
        "agent.budget.maxTokens: must be greater than 0",
      ],
      [
        "POST",
        "/v1/sessions",
        agent({ budget: { maxTokens: 1.5 } }),
        "agent.budget.maxTokens: must be a whole number",
      ],
      [
        "POST",
        "/v1/sessions",
        agent({ budget: { maxTokens: 2 ** 63 } }),
        "agent.budget.maxTokens: must be at most 9007199254740991",
      ],
      ["POST", "/v1/sessions", agent({ maxTurns: 5000 }), "agent.maxTurns: must be at most 1000"],
      [
        "POST",
        "/v1/sessions",
        agent({ model: { provider: "scripted", steps: [{ text: "x", fault: "boom" }] } }),
        'agent.model.steps[0].fault: must be one of "connection", "stream_cut", "rejected"',
      ],
      [
        "POST",
        `/v1/sessions/${session}/messages`,
        { content: "x", goal: { text: "g".repeat(100_001), maxRounds: 1 } },
        "goal.text: must be at most 100000 characters",
      ],
      [
        "GET",
        "/v1/sessions?status=nope",
        undefined,
        'status: must be one of "parked", "active", "cancelled", "queued", "running", "completed"',
      ],
      ["GET", "/v1/sessions?batch=", undefined, "batch: must be a non-empty string"],
    ];
    for (const [method, path, body, said] of cases) {
      const { status, json } = await call(method, path, body);
      expect({ path, status, message: json.error.message }).toEqual({ path, status: 400, message: said });
    }
  });
});
