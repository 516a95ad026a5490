/**
 * An unknown field of a body is named by its own path in the 400's `field` (`agent.modle`,
 * `dryRun`, `agent.model.steps[0].later`), as every other refused field is. Before, `field`
 * was its parent (`agent`, or `""` for the body itself), and a client that shows the error
 * next to the field (a form, an editor's JSON path) pointed at the whole agent or nowhere.
 * Several unknown fields: the first is `field`, the others are named in the message (ten at
 * most, each cut at 100 characters, as before: the answer does not echo a body back).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

type Refusal = { error: { code: string; field: string; message: string } };

describe("an unknown body field", () => {
  let fleet: FleetEnv;
  let base: string;
  let key: string;

  const call = async (method: string, path: string, body: unknown) => {
    const response = await fetch(`${base}${path}`, {
      method,
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    return { status: response.status, json: (await response.json()) as Refusal };
  };

  beforeAll(async () => {
    fleet = await createFleetEnv("unknown-field-path");
    key = (await new ApiKeys(fleet.database).create("acme")).key;
    base = (await fleet.startApi()).api.url;
  }, 60_000);
  afterAll(() => fleet?.close());

  it.each([
    ["in the agent", { agent: { ...AGENT, modle: "x" } }, "agent.modle"],
    ["in the body", { agent: AGENT, inptu: "q" }, "inptu"],
    [
      "in a scripted step",
      { agent: { model: { ...AGENT.model, steps: [{ text: "ok", later: 1 }] } } },
      "agent.model.steps[0].later",
    ],
    [
      "in a message",
      { agent: AGENT, messages: [{ role: "user", content: "hi", extra: 1 }] },
      "messages[0].extra",
    ],
  ])("%s is named by its own path", async (_name, body, field) => {
    const { status, json } = await call("POST", "/v1/sessions", body);
    expect(status).toBe(400);
    expect(json.error).toEqual({ code: "invalid_request", field, message: `${field}: unknown field` });
  });

  it('of a body that takes none (a DELETE\'s `{"dryRun": true}`) is named too', async () => {
    const { json } = await call("DELETE", "/v1/sessions/00000000-0000-4000-8000-000000000000", {
      dryRun: true,
    });
    expect(json.error).toEqual({
      code: "invalid_request",
      field: "dryRun",
      message: "dryRun: unknown field",
    });
  });

  it("several: the first is `field`, the others named in the message, ten at most, cut at 100 characters", async () => {
    const many = Object.fromEntries(Array.from({ length: 5_000 }, (_, i) => [`k${i}`, 1]));
    const { json } = await call("POST", "/v1/sessions", { agent: { ...AGENT, ...many } });
    expect(json.error.field).toBe("agent.k0");
    expect(json.error.message).toBe(
      'agent.k0: unknown field; also unknown: "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9", "k10" and 4,989 more',
    );
    const long = await call("POST", "/v1/sessions", { agent: AGENT, ["y".repeat(1_000_000)]: 1 });
    expect(long.json.error.field).toBe(`["${"y".repeat(100)}…"]`);
    expect(long.json.error.message).toBe(`["${"y".repeat(100)}…"]: unknown field`);
  });
});
