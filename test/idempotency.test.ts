/**
 * `Idempotency-Key` on `POST /v1/…` (contracts §9): concurrent retries of one batch create
 * one batch; a replay returns the first answer; another body with the key is a 409; keys
 * are per tenant and last 24 h.
 */
import { request as httpRequest } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FleetApiError, FleetClient } from "../src/producer/client.js";
import { canonicalJson, legacyRequestHash, requestHash } from "../src/producer/request-hash.js";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { IdempotencyStore } from "../src/shared/store/idempotency.js";
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

  it("the 409 says what differs: the method and path the key was used for, or the body, never that body", async () => {
    const first = await post(
      "a",
      "/v1/sessions",
      { agent: AGENT, metadata: { secret: "first-body-s3cr3t" } },
      "where-1",
    );
    expect(first.status, first.text).toBe(201);
    const elsewhere = await post("a", "/v1/batches", { sessions: [{ agent: AGENT }] }, "where-1");
    expect(elsewhere.status).toBe(409);
    expect(elsewhere.json.error).toMatchObject({ code: "conflict", reason: "idempotency_key_reused" });
    expect(elsewhere.json.error.message).toContain(
      "for another request, POST /v1/sessions, not POST /v1/batches",
    );
    const sameRoute = await post("a", "/v1/sessions", { agent: AGENT }, "where-1");
    expect(sameRoute.status).toBe(409);
    expect(sameRoute.json.error.message).toContain(
      "used within 24 h for POST /v1/sessions with another body",
    );
    for (const answer of [elsewhere, sameRoute]) expect(answer.text).not.toContain("s3cr3t");
    // A key claimed before the method and path were kept: the general words.
    const store = new IdempotencyStore(fleet.database);
    expect(await store.begin("a", "where-2", requestHash("POST", "/v1/sessions", {}))).toEqual({
      state: "new",
    });
    const old = await post("a", "/v1/batches", { sessions: [{ agent: AGENT }] }, "where-2");
    expect(old.status).toBe(409);
    expect(old.json.error.message).toContain("for another request (another method, path or body)");
  });

  it("the same body with its keys in another order replays; a key stored by the previous hash still replays", async () => {
    const first = await post("a", "/v1/sessions", { agent: AGENT, metadata: { x: 1, y: [1, 2] } }, "order-1");
    expect(first.status, first.text).toBe(201);
    const reordered = await post(
      "a",
      "/v1/sessions",
      { metadata: { y: [1, 2], x: 1 }, agent: { model: { steps: [{ text: "ok" }], provider: "scripted" } } },
      "order-1",
    );
    expect(reordered.status, reordered.text).toBe(201);
    expect(reordered.json.id).toBe(first.json.id);
    // Arrays keep their order: another order is another body.
    const swapped = await post(
      "a",
      "/v1/sessions",
      { agent: AGENT, metadata: { x: 1, y: [2, 1] } },
      "order-1",
    );
    expect(swapped.status).toBe(409);
    // A key claimed by a release that hashed the body in its own key order.
    const body = { metadata: { b: 2, a: 1 }, agent: AGENT };
    const legacy = legacyRequestHash("POST", "/v1/sessions", body);
    expect(legacy).not.toBe(requestHash("POST", "/v1/sessions", body));
    const store = new IdempotencyStore(fleet.database);
    expect(await store.begin("a", "legacy-1", legacy)).toEqual({ state: "new" });
    await store.complete("a", "legacy-1", 201, JSON.stringify({ id: "from-before-the-upgrade" }));
    const replayed = await post("a", "/v1/sessions", body, "legacy-1");
    expect(replayed.status).toBe(201);
    expect(replayed.json.id).toBe("from-before-the-upgrade");
  });

  it("canonicalJson sorts keys at every level, keeps arrays and drops undefined like JSON.stringify", () => {
    expect(canonicalJson({ b: 1, a: { d: [3, { f: 1, e: 2 }], c: null }, u: undefined })).toBe(
      '{"a":{"c":null,"d":[3,{"e":2,"f":1}]},"b":1}',
    );
    expect(canonicalJson("x")).toBe(JSON.stringify("x"));
    expect(canonicalJson(null)).toBe("null");
  });

  it("a request sent in absolute form (`POST http://host/v1/…`, as proxies send it) holds its key too", async () => {
    /** One POST whose request target is `target` as it is (absolute form when it names a host). */
    const postTo = (target: string, body: unknown, idempotencyKey: string) =>
      new Promise<{ status: number; text: string }>((resolve, reject) => {
        const url = new URL(base);
        const req = httpRequest(
          {
            host: url.hostname,
            port: url.port,
            method: "POST",
            path: target,
            headers: {
              authorization: `Bearer ${key.a}`,
              "content-type": "application/json",
              "idempotency-key": idempotencyKey,
            },
          },
          (res) => {
            let text = "";
            res.on("data", (d) => {
              text += d;
            });
            res.on("end", () => resolve({ status: res.statusCode ?? 0, text }));
          },
        );
        req.on("error", reject);
        req.end(JSON.stringify(body));
      });
    const body = { agent: AGENT, metadata: { form: "absolute" } };
    const { sql } = fleet.database;
    const count = async () =>
      (
        await sql<
          { n: number }[]
        >`select count(*)::int as n from sessions where metadata->>'form' = 'absolute'`
      )[0]!.n;
    const first = await postTo(`${base}/v1/sessions`, body, "absolute-1");
    expect(first.status, first.text).toBe(201);
    const again = await postTo(`${base}/v1/sessions`, body, "absolute-1");
    expect(again.status, again.text).toBe(201);
    expect(JSON.parse(again.text).id).toBe(JSON.parse(first.text).id);
    // The same request in origin form is the same request.
    const origin = await postTo("/v1/sessions", body, "absolute-1");
    expect(origin.status, origin.text).toBe(201);
    expect(JSON.parse(origin.text).id).toBe(JSON.parse(first.text).id);
    expect(await count()).toBe(1);
    // And another body with the key is refused, whichever form the first one came in.
    const other = await postTo(`${base}/v1/sessions`, { agent: AGENT }, "absolute-1");
    expect(other.status, other.text).toBe(409);
    expect(JSON.parse(other.text).error.message).toContain("for POST /v1/sessions with another body");
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
