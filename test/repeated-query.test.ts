/**
 * A query parameter given twice (a client that appends rather than sets it, a proxy that adds
 * one): no `/v1` route reads a list, and each refused the list in words about the value, which
 * was right — `?include=usage&include=usage` answered `include: expected "usage"`,
 * `?status=parked&status=parked` `Invalid option: expected one of "parked"|…`,
 * `?run=R&run=R` `must be a run id of this session`. It is a 400 naming the parameter and
 * saying it was given more than once.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { jsonCall } from "./support/json-call.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

describe("a query parameter given more than once", () => {
  let fleet: FleetEnv;
  let base: string;
  let key: string;
  let session: string;
  let batch: string;
  let run: string;

  const call = (method: string, path: string, body?: unknown) => jsonCall(base, key, method, path, body);

  beforeAll(async () => {
    fleet = await createFleetEnv("repeated-query");
    key = (await new ApiKeys(fleet.database).create("acme")).key;
    base = (await fleet.startApi()).api.url;
    session = (await call("POST", "/v1/sessions", { agent: AGENT })).json.id;
    run = (await call("POST", `/v1/sessions/${session}/messages`, { content: "hi" })).json.runId;
    batch = (await call("POST", "/v1/batches", { sessions: [{ agent: AGENT }] })).json.id;
  }, 60_000);
  afterAll(() => fleet?.close());

  it("is a 400 naming it, whatever the route and the values", async () => {
    const cases: [string, string][] = [
      ["include", `/v1/batches/${batch}?include=usage&include=usage`],
      ["status", "/v1/sessions?status=parked&status=parked"],
      ["limit", "/v1/sessions?limit=5&limit=5"],
      ["parkedReason", "/v1/sessions?status=parked&parkedReason=refused&parkedReason=refused"],
      ["batch", `/v1/sessions?batch=${batch}&batch=${batch}`],
      ["afterSeq", `/v1/sessions/${session}?afterSeq=1&afterSeq=1`],
      ["limit", `/v1/sessions/${session}?limit=1&limit=2&limit=3`],
      ["after", `/v1/batches/${batch}/results?after=${session}&after=${session}`],
      ["run", `/v1/sessions/${session}/events?run=${run}&run=${run}`],
      ["after", `/v1/batches/${batch}/events?after=0-1&after=0-1`],
    ];
    for (const [name, path] of cases) {
      const times = path.split(`${name}=`).length - 1;
      const answer = await call("GET", path);
      expect([answer.status, answer.json.error], path).toEqual([
        400,
        {
          code: "invalid_request",
          field: name,
          message: `${name}: is given ${times} times; give it once (no route reads a list of them)`,
        },
      ]);
    }
  }, 60_000);

  it("a parameter given once is read as before", async () => {
    expect((await call("GET", `/v1/batches/${batch}?include=usage`)).status).toBe(200);
    expect((await call("GET", "/v1/sessions?status=parked")).status).toBe(200);
  }, 30_000);
});
