/**
 * Which answers an `Idempotency-Key` keeps (contracts §9). A refusal that depends on the fleet
 * as it stands — a tool no worker has registered yet, a tenant limit — did nothing and is
 * released, as a 429 is: once the operator deploys the worker with the tool, the client's retry
 * with the same key acts. A refusal of the body itself is kept (another body with the key is
 * still a 409). The query of a keyed request is compared as parsed, its parameters in any
 * order; another query is still another request.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { requestHash } from "../src/producer/request-hash.js";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { IdempotencyStore } from "../src/shared/store/idempotency.js";
import { registerToolNames } from "../src/shared/tool-names.js";
import { postKeyed, readAnswer } from "./support/answer.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

describe("Idempotency-Key: what is kept", () => {
  let fleet: FleetEnv;
  let base: string;
  let apiKey: string;

  beforeAll(async () => {
    fleet = await createFleetEnv("idem-released", { env: { FLEET_TENANT_MAX_ACTIVE_SESSIONS: "2" } });
    apiKey = (await new ApiKeys(fleet.database).create("a")).key;
    base = (await fleet.startApi()).api.url;
  }, 60_000);
  afterAll(() => fleet?.close());

  const post = (path: string, body: unknown, idempotencyKey: string) =>
    postKeyed(base, apiKey, path, body, idempotencyKey).then(async (response) => ({
      ...(await readAnswer(response)),
      replayed: response.headers.get("idempotent-replayed") === "true",
    }));

  it("a 400 for a tool no worker has registered is released: the retry acts once the tool is there", async () => {
    const body = { sessions: [{ agent: { ...AGENT, tools: ["grep_repo"] }, customId: "g" }] };
    const refused = await post("/v1/batches", body, "tools-1");
    expect(refused.status, refused.text).toBe(400);
    expect(refused.json.error.field).toBe("sessions[0].agent.tools[0]");
    // The operator deploys a worker that offers the tool.
    await registerToolNames(fleet.redis, fleet.config.prefix, ["grep_repo"]);
    const retried = await post("/v1/batches", body, "tools-1");
    expect(retried.status, retried.text).toBe(201);
    expect(retried.replayed).toBe(false);
    // Now kept: the retry after that replays, and creates nothing.
    const again = await post("/v1/batches", body, "tools-1");
    expect(again.replayed).toBe(true);
    expect(again.json.id).toBe(retried.json.id);
    const { sql } = fleet.database;
    expect((await sql`select 1 from batches`).length).toBe(1);
  });

  it("a 400 for a webhook while the fleet has no FLEET_WEBHOOK_SECRET is released", async () => {
    const body = {
      sessions: [{ agent: AGENT, customId: "w" }],
      webhook: { url: "https://hooks.example.com/h" },
    };
    const refused = await post("/v1/batches", body, "secret-1");
    expect(refused.status, refused.text).toBe(400);
    expect(refused.json.error.message).toMatch(/FLEET_WEBHOOK_SECRET/);
    // Nothing was done: once the operator sets the secret, the retry with this key acts (here the
    // caller sends the batch without its webhook instead; kept, that was a 409 for 24 h).
    const without = await post("/v1/batches", { sessions: body.sessions }, "secret-1");
    expect(without.status, without.text).toBe(201);
    expect(without.replayed).toBe(false);
  });

  it("a 400 for more sessions than the tenant's cap is released; a 400 of the body itself is kept", async () => {
    const three = { sessions: [1, 2, 3].map((i) => ({ agent: AGENT, input: `go ${i}`, customId: `c${i}` })) };
    const capped = await post("/v1/batches", three, "cap-1");
    expect(capped.status, capped.text).toBe(400);
    expect(capped.json.error.message).toMatch(/FLEET_TENANT_MAX_ACTIVE_SESSIONS/);
    // Released: the same key is free for the request the caller sends instead.
    const smaller = await post("/v1/batches", { sessions: three.sessions.slice(0, 1) }, "cap-1");
    expect(smaller.status, smaller.text).toBe(201);

    // A body refused for what it is stays refused the same way: kept, and another body is a 409.
    const bad = await post("/v1/sessions", { agent: { model: { provider: "scripted" } } }, "shape-1");
    expect(bad.status).toBe(400);
    const replayed = await post("/v1/sessions", { agent: { model: { provider: "scripted" } } }, "shape-1");
    expect(replayed.replayed).toBe(true);
    const other = await post("/v1/sessions", { agent: AGENT }, "shape-1");
    expect(other.status).toBe(409);
    expect(other.json.error.reason).toBe("idempotency_key_reused");
  });

  it("a query on a POST that creates is refused before its key is claimed: the same key without it acts", async () => {
    // No POST documents a query (route-docs.ts): one sent is a 400 naming it, and holds no key
    // (before, the query was ignored, created, and hashed as part of the key's request).
    const body = { agent: AGENT, metadata: { q: 1 } };
    const refused = await post("/v1/sessions?a=1&b=2", body, "query-1");
    expect(refused.status, refused.text).toBe(400);
    expect(refused.json.error.field).toBe("a");
    const created = await post("/v1/sessions", body, "query-1");
    expect(created.status, created.text).toBe(201);
    expect(created.replayed).toBe(false);
    const again = await post("/v1/sessions", body, "query-1");
    expect([again.replayed, again.json.id]).toEqual([true, created.json.id]);
    // A key a previous release stored for a request with a query: that request is now refused.
    const store = new IdempotencyStore(fleet.database);
    expect(await store.begin("a", "query-2", requestHash("POST", "/v1/sessions?z=1&a=1", body))).toEqual({
      state: "new",
    });
    await store.complete("a", "query-2", 201, JSON.stringify({ id: "from-before-the-upgrade" }));
    expect((await post("/v1/sessions?z=1&a=1", body, "query-2")).status).toBe(400);
  });
});

describe("Idempotency-Key: refusals by the operator's settings", () => {
  let fleet: FleetEnv;
  let base: string;
  let apiKey: string;

  beforeAll(async () => {
    fleet = await createFleetEnv("idem-settings", {
      env: {
        FLEET_WEBHOOK_SECRET: "whsec-test",
        FLEET_WEBHOOK_ALLOWED_URLS: "https://hooks.example.com,http://10.1.2.3",
        FLEET_WEBHOOK_DENY_PRIVATE: "1",
      },
    });
    apiKey = (await new ApiKeys(fleet.database).create("a")).key;
    base = (await fleet.startApi()).api.url;
  }, 60_000);
  afterAll(() => fleet?.close());

  const post = (body: unknown, idempotencyKey: string) =>
    postKeyed(base, apiKey, "/v1/sessions", body, idempotencyKey).then(readAnswer);

  it("a 400 for an endpoint, a baseUrl or a price the operator has not set up is released", async () => {
    const refusals = [
      { model: { provider: "openai", model: "gpt-4o", endpoint: "local" }, field: "agent.model.endpoint" },
      {
        model: { provider: "openai", model: "gpt-4o", baseUrl: "http://127.0.0.1:9/v1" },
        field: "agent.model.baseUrl",
      },
      {
        model: { provider: "openai", model: "no-such-model" },
        budget: { maxCostUsd: 1 },
        field: "agent.model.model",
      },
    ];
    for (const [i, { field, ...agent }] of refusals.entries()) {
      const refused = await post({ agent }, `settings-${i}`);
      expect(refused.status, refused.text).toBe(400);
      expect(refused.json.error.field).toBe(field);
      // Released: the key is free again (kept, this other body was a 409).
      const other = await post({ agent: AGENT }, `settings-${i}`);
      expect(other.status, other.text).toBe(201);
    }
  });

  it("a 400 for a webhook URL outside FLEET_WEBHOOK_ALLOWED_URLS or at a private address is released", async () => {
    for (const [i, url] of ["https://elsewhere.example.com/hook", "http://10.1.2.3/hook"].entries()) {
      const body = { sessions: [{ agent: AGENT, customId: "w" }], webhook: { url } };
      const refused = await postKeyed(base, apiKey, "/v1/batches", body, `webhook-${i}`).then(readAnswer);
      expect(refused.status, refused.text).toBe(400);
      expect(refused.json.error.field).toBe("webhook.url");
      // The operator widens the list (or lets private addresses through), or the caller sends
      // the batch to the URL it is told to: the same key acts. Kept, this was a 409.
      const other = await postKeyed(
        base,
        apiKey,
        "/v1/batches",
        { ...body, webhook: { url: "https://hooks.example.com/hook" } },
        `webhook-${i}`,
      ).then(readAnswer);
      expect(other.status, other.text).toBe(201);
    }
  });
});
