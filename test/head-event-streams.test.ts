/**
 * `HEAD` of an event stream (`curl -I`, an uptime monitor, a link checker): Fastify answers
 * HEAD of every GET route with that route. An event stream writes its head and events through
 * the raw response, and Node sends nothing of a HEAD answer's writes, its head included, until
 * the answer ends, which a stream never does by itself: the client got no status line, ever,
 * while the stream held one of its tenant's FLEET_SSE_MAX_STREAMS_PER_TENANT places (and read
 * Redis each second) until the client hung up. A HEAD is answered at once now, as the GET
 * would begin (200 `text/event-stream`, or its 4xx), holding nothing.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { keyedCall } from "./support/keyed-call.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };
const MISSING = "00000000-0000-4000-8000-000000000000";

describe("HEAD of an event stream", () => {
  let fleet: FleetEnv;
  let base: string;
  let acme: string;
  let globex: string;
  let session: string;
  let batch: string;

  const call = keyedCall(() => base, 5_000);

  beforeAll(async () => {
    // One stream a tenant: a HEAD that kept its place shuts the tenant's next reader out.
    fleet = await createFleetEnv("head-event-streams", { env: { FLEET_SSE_MAX_STREAMS_PER_TENANT: "1" } });
    const keys = new ApiKeys(fleet.database);
    acme = (await keys.create("acme")).key;
    globex = (await keys.create("globex")).key;
    base = (await fleet.startApi()).api.url;
    const created = async (path: string, body: unknown) =>
      ((await (await call("POST", path, acme, body)).json()) as { id: string }).id;
    session = await created("/v1/sessions", { agent: AGENT });
    batch = await created("/v1/batches", { sessions: [{ agent: AGENT }], open: true });
  }, 60_000);
  afterAll(() => fleet?.close());

  for (const [name, path] of [
    ["a session's", () => `/v1/sessions/${session}/events`],
    ["a batch's", () => `/v1/batches/${batch}/events`],
  ] as const) {
    it(`${name} is answered at once with the stream's head, and holds no place of its tenant`, async () => {
      const head = await call("HEAD", path(), acme);
      expect(head.status).toBe(200);
      expect(head.headers.get("content-type")).toBe("text/event-stream; charset=utf-8");
      expect(head.headers.get("cache-control")).toBe("no-store, no-transform");
      // The tenant's one place is free: its reader gets the stream, not a 429.
      const reader = new AbortController();
      const stream = await call("GET", path(), acme, undefined, reader.signal);
      expect(stream.status, await (stream.status === 200 ? "" : stream.text())).toBe(200);
      reader.abort();
      await stream.body?.cancel().catch(() => {});
    }, 30_000);
  }

  it("another tenant's, or a missing, session or batch is a 404 as for GET; a bad Last-Event-ID a 400", async () => {
    for (const path of [
      `/v1/sessions/${session}/events`,
      `/v1/batches/${batch}/events`,
      `/v1/sessions/${MISSING}/events`,
      `/v1/batches/${MISSING}/events`,
    ])
      expect((await call("HEAD", path, globex)).status, path).toBe(404);
    expect((await call("HEAD", `/v1/sessions/${session}/events?after=x`, acme)).status).toBe(400);
  }, 30_000);
});
