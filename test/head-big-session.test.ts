/**
 * `HEAD /v1/sessions/:id` of a big session (`curl -I`, an uptime monitor, a link checker).
 * Fastify answers HEAD of a GET route with that route: the whole history was read into memory
 * (megabytes from Postgres), one of the API's places for big work (FLEET_API_MAX_BIG_BODIES)
 * waited for and held, and the key-revocation and stall watchers started, all for an answer
 * without a body — and with the places taken by readers, the HEAD waited behind them or got a
 * 429. A HEAD of a big unpaged answer is now answered at once after the GET's checks, with the
 * answer's head and no body, reading no message and taking no place. (A small answer's HEAD
 * is the GET's, with its length.)
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { type CountingProxy, startCountingProxy } from "./support/counting-proxy.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { keyedCall } from "./support/keyed-call.js";
import { pausedAfterHead } from "./support/paused-reader.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };
const MISSING = "00000000-0000-4000-8000-000000000000";
/** About 8 MB of history: a big answer (over 1 MiB), more than the loopback socket's buffers. */
const BIG_HISTORY = [
  { role: "user" as const, content: "q".repeat(4_000_000) },
  { role: "assistant" as const, content: "a".repeat(4_000_000), stopReason: "end_turn" },
];

describe("HEAD of a big session", () => {
  let proxy: CountingProxy;
  let fleet: FleetEnv;
  let base: string;
  let port: number;
  let acme: string;
  let globex: string;
  let big: string;
  let small: string;

  const call = keyedCall(() => base, 10_000);

  beforeAll(async () => {
    proxy = await startCountingProxy();
    // One place for big work and none to wait in: a HEAD that wants a place is refused (429)
    // while a reader holds it.
    fleet = await createFleetEnv("head-big-session", {
      viaDatabase: (url) => proxy.urlFor(url),
      env: { FLEET_API_MAX_BIG_BODIES: "1", FLEET_API_BIG_BODIES_WAITING: "0" },
    });
    const keys = new ApiKeys(fleet.database);
    acme = (await keys.create("acme")).key;
    globex = (await keys.create("globex")).key;
    base = (await fleet.startApi()).api.url;
    port = Number(new URL(base).port);
    const created = await call("POST", "/v1/sessions", acme, { agent: AGENT, messages: BIG_HISTORY });
    expect(created.status).toBe(201);
    big = ((await created.json()) as { id: string }).id;
    const other = await call("POST", "/v1/sessions", acme, {
      agent: AGENT,
      messages: [{ role: "user", content: "hi" }],
    });
    small = ((await other.json()) as { id: string }).id;
  }, 60_000);
  afterAll(async () => {
    await fleet?.close();
    await proxy?.close();
  });

  it("reads no message of it and is answered with the GET's head", async () => {
    const before = proxy.received();
    const head = await call("HEAD", `/v1/sessions/${big}`, acme);
    expect(head.status).toBe(200);
    expect(head.headers.get("content-type")).toBe("application/json; charset=utf-8");
    expect(await head.text()).toBe("");
    // Before: the whole history came from Postgres (8 MB) for a HEAD.
    expect(proxy.received() - before).toBeLessThan(500_000);
  }, 30_000);

  it("takes no place of big work: answered while a reader that takes nothing holds the only one", async () => {
    const reader = await pausedAfterHead(port, `/v1/sessions/${big}`, acme);
    try {
      // Before: 429 big_answers (the one place held, none to wait in).
      expect((await call("HEAD", `/v1/sessions/${big}`, acme)).status).toBe(200);
      expect((await call("HEAD", `/v1/sessions/${big}?afterSeq=0`, acme)).status).toBe(200);
    } finally {
      reader.socket.destroy();
    }
  }, 30_000);

  it("runs the GET's checks: another tenant's or a missing session is a 404, a bad query a 400", async () => {
    expect((await call("HEAD", `/v1/sessions/${big}`, globex)).status).toBe(404);
    expect((await call("HEAD", `/v1/sessions/${MISSING}`, acme)).status).toBe(404);
    expect((await call("HEAD", `/v1/sessions/${big}?afterSeq=-1`, acme)).status).toBe(400);
  }, 30_000);

  it("of a small answer (a small session, a page of a big one) is the GET's head, with its length", async () => {
    for (const path of [`/v1/sessions/${small}`, `/v1/sessions/${big}?limit=1&afterSeq=1`]) {
      const get = await call("GET", path, acme);
      const head = await call("HEAD", path, acme);
      expect(head.status).toBe(200);
      expect(head.headers.get("content-length")).toBe(String(Buffer.byteLength(await get.text())));
    }
  }, 30_000);
});
