/**
 * `Idempotency-Key` on `POST /v1/…` (contracts §9): concurrent retries of one batch create
 * one batch; a replay returns the first answer; another body with the key is a 409; keys
 * are per tenant and last 24 h.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FleetApiError, FleetClient } from "../src/producer/client.js";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { readAnswer } from "./support/answer.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

describe("Idempotency-Key", () => {
  let fleet: FleetEnv;
  let base: string;
  const key: Record<string, string> = {};

  beforeAll(async () => {
    fleet = await createFleetEnv("idempotency");
    const keys = new ApiKeys(fleet.database);
    for (const tenant of ["a", "b"]) key[tenant] = (await keys.create(tenant)).key;
    base = (await fleet.startApi()).api.url;
  }, 60_000);
  afterAll(() => fleet?.close());

  const post = (tenant: string, path: string, body: unknown, idempotencyKey: string) =>
    fetch(`${base}${path}`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${key[tenant]}`,
        "content-type": "application/json",
        "idempotency-key": idempotencyKey,
      },
      body: JSON.stringify(body),
    }).then(readAnswer);

  it("the same POST /v1/batches sent concurrently with one key creates one batch", async () => {
    const body = {
      sessions: Array.from({ length: 200 }, (_, i) => ({
        agent: AGENT,
        input: `go ${i}`,
        customId: `i-${i}`,
      })),
    };
    const answers = await Promise.all(Array.from({ length: 4 }, () => post("a", "/v1/batches", body, "k-1")));
    for (const answer of answers) expect(answer.status, answer.text).toBe(201);
    expect(new Set(answers.map((a) => a.json.id)).size).toBe(1);
    expect(new Set(answers.map((a) => a.text)).size).toBe(1);
    const { sql } = fleet.database;
    expect((await sql`select 1 from batches`).length).toBe(1);
    expect((await sql`select 1 from sessions`).length).toBe(200);
    expect((await sql`select 1 from runs`).length).toBe(200);
    // A later retry replays the stored answer.
    const again = await post("a", "/v1/batches", body, "k-1");
    expect(again.text).toBe(answers[0]!.text);
    expect((await sql`select 1 from sessions`).length).toBe(200);
  });

  it("another body with the same key is a 409; another tenant's key space is its own", async () => {
    const reused = await post("a", "/v1/batches", { sessions: [{ agent: AGENT }] }, "k-1");
    expect(reused.status).toBe(409);
    expect(reused.json.error).toMatchObject({ code: "conflict", reason: "idempotency_key_reused" });
    const other = await post("b", "/v1/batches", { sessions: [{ agent: AGENT }] }, "k-1");
    expect(other.status).toBe(201);
    // Other routes too, through the client.
    const client = new FleetClient({ baseUrl: base, apiKey: key.b });
    const first = await client.createSession({ agent: AGENT }, { idempotencyKey: "s-1" });
    const second = await client.createSession({ agent: AGENT }, { idempotencyKey: "s-1" });
    expect(second.id).toBe(first.id);
    const error = await client
      .createSession({ agent: AGENT, metadata: { x: 1 } }, { idempotencyKey: "s-1" })
      .catch((e: unknown) => e);
    expect((error as FleetApiError).reason).toBe("idempotency_key_reused");
    const bad = await post("b", "/v1/sessions", { agent: AGENT }, "has space");
    expect(bad.status).toBe(400);
    expect(bad.json.error.field).toBe("Idempotency-Key");
  });

  it("a key older than 24 h acts again", async () => {
    const body = { sessions: [{ agent: AGENT, customId: "old" }] };
    const first = await post("a", "/v1/batches", body, "k-old");
    await fleet.database
      .sql`update idempotency_keys set created_at = now() - interval '25 hours' where key = 'k-old'`;
    const second = await post("a", "/v1/batches", body, "k-old");
    expect(second.status).toBe(201);
    expect(second.json.id).not.toBe(first.json.id);
  });
});
