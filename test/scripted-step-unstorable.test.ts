/**
 * A scripted step is model output (contracts §12, model-config.ts `modelText`): a script plays a
 * model, NUL and lone surrogates included, and such output is stored with U+FFFD in their place,
 * as any model's is — so a script can check that nothing a model sends makes an append fail
 * (test/run-limits.test.ts). The caller sees what was stored in the session's `agent`
 * (GET /v1/sessions/:id) before any run. Every other string of a request, the agent's own
 * settings included, is the caller's text and is refused with a 400 naming it, never altered.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

describe("unstorable text in an agent", () => {
  let fleet: FleetEnv;
  let base: string;
  let key: string;

  /** Sent as written: `\\ud800` escapes a lone surrogate in the JSON text itself. */
  const create = async (json: string) => {
    const response = await fetch(`${base}/v1/sessions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: json,
    });
    return { status: response.status, json: (await response.json()) as Record<string, unknown> };
  };

  beforeAll(async () => {
    fleet = await createFleetEnv("scripted-step-unstorable");
    key = (await new ApiKeys(fleet.database).create("acme")).key;
    base = (await fleet.startApi()).api.url;
  }, 60_000);
  afterAll(() => fleet?.close());

  it("in a scripted step is model output: stored with U+FFFD, as the session's agent shows", async () => {
    const created = await create(
      '{"agent":{"model":{"provider":"scripted","steps":[{"text":"a\\ud800b","toolCalls":[{"name":"x\\udc00","arguments":{"k":"\\u0000"}}]}]}}}',
    );
    expect(created.status).toBe(201);
    const session = (await (
      await fetch(`${base}/v1/sessions/${created.json.id}`, { headers: { authorization: `Bearer ${key}` } })
    ).json()) as { agent: { model: { steps: unknown[] } } };
    expect(session.agent.model.steps).toEqual([
      { text: "a\uFFFDb", toolCalls: [{ name: "x\uFFFD", arguments: { k: "\uFFFD" } }] },
    ]);
  });

  it.each([
    ["agent.system", '{"agent":{"model":{"provider":"scripted","steps":[{}]},"system":"a\\ud800"}}'],
    ["agent.tools[0]", '{"agent":{"model":{"provider":"scripted","steps":[{}]},"tools":["\\udc00"]}}'],
    ["input", '{"agent":{"model":{"provider":"scripted","steps":[{}]}},"input":"a\\ud800"}'],
  ])("in %s is the caller's text: a 400 naming it", async (field, json) => {
    const refused = await create(json);
    expect(refused.status).toBe(400);
    expect(refused.json.error).toMatchObject({ field, code: "invalid_request" });
  });
});
