/**
 * A query parameter a route does not read is a 400 naming it as it was sent, on every route
 * that reads a query: `?limit[]=1` (PHP's and qs's list form) is `limit[]: is not a parameter of
 * this route`, as the event streams say it. The lists and reads (GET /v1/sessions, a session's,
 * a batch's, its results) named it as a JSON path, `["limit[]"]: unknown field`, which names
 * no parameter a caller could look up.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { jsonCall } from "./support/json-call.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

describe("a query parameter a route does not read", () => {
  let fleet: FleetEnv;
  let base: string;
  let key: string;
  let session: string;
  let batch: string;

  const call = (method: string, path: string, body?: unknown) => jsonCall(base, key, method, path, body);

  beforeAll(async () => {
    fleet = await createFleetEnv("query-names");
    key = (await new ApiKeys(fleet.database).create("acme")).key;
    base = (await fleet.startApi()).api.url;
    session = (await call("POST", "/v1/sessions", { agent: AGENT })).json.id;
    batch = (await call("POST", "/v1/batches", { sessions: [{ agent: AGENT }] })).json.id;
  }, 60_000);
  afterAll(() => fleet?.close());

  it("is named as it was sent, on every route that reads a query", async () => {
    const routes = [
      "/v1/sessions",
      `/v1/sessions/${session}`,
      `/v1/batches/${batch}`,
      `/v1/batches/${batch}/results`,
      `/v1/sessions/${session}/events`,
      `/v1/batches/${batch}/events`,
    ];
    for (const route of routes)
      for (const [query, name] of [
        ["limit[]=1", "limit[]"],
        ["after[a]=1", "after[a]"],
        ["bogus=1", "bogus"],
        ["a%20b=1", "a b"],
      ] as const) {
        const { status, json } = await call("GET", `${route}?${query}`);
        expect({ route, status, error: json.error }).toEqual({
          route,
          status: 400,
          error: {
            code: "invalid_request",
            field: name,
            message: `${name}: is not a parameter of this route`,
          },
        });
      }
  });

  it("one the route reads is read as before", async () => {
    expect((await call("GET", "/v1/sessions?limit=1")).status).toBe(200);
    expect((await call("GET", `/v1/sessions/${session}?limit=1`)).status).toBe(200);
    expect((await call("GET", `/v1/batches/${batch}?include=usage`)).status).toBe(200);
    expect((await call("GET", `/v1/batches/${batch}/results?after=${session}`)).status).toBe(200);
  });
});
