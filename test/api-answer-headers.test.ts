/**
 * What the API's answers say to caches and browsers about what they carry. A tenant's data —
 * transcripts with their tools' outputs, batch results, event streams, the errors that name
 * its ids — is `Cache-Control: no-store`: it was sent with no cache header at all (only
 * `GET /v1/webhook-secret` said `no-store`), so a browser kept every answer read by a page or
 * a script other than the console (which asks `cache: "no-store"` itself) in its disk cache,
 * and a proxy told to cache what it may was told nothing. Every answer is
 * `X-Content-Type-Options: nosniff`, so that none (a 404 quoting the URL asked for) is read as
 * another type than the one it says. The console's page keeps `no-cache` (it holds no data) and
 * its content-hashed assets their long cache.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { ensureConsoleBuilt } from "./support/console-browser.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const agent = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] }, tools: [] };

describe("the API's cache and content-type headers", () => {
  let fleet: FleetEnv;
  let base: string;
  let key: string;
  let sessionId: string;
  let batchId: string;

  const get = (path: string, headers: Record<string, string> = { authorization: `Bearer ${key}` }) =>
    fetch(`${base}${path}`, { headers, signal: AbortSignal.timeout(20_000) });

  beforeAll(async () => {
    await ensureConsoleBuilt();
    fleet = await createFleetEnv("answerheaders");
    base = (await fleet.startApi()).api.url;
    key = (await new ApiKeys(fleet.database).create("acme")).key;
    const headers = { authorization: `Bearer ${key}`, "content-type": "application/json" };
    const created = await fetch(`${base}/v1/sessions`, {
      method: "POST",
      headers,
      body: JSON.stringify({ agent, messages: [{ role: "user", content: "my password is hunter2" }] }),
    });
    expect(created.status).toBe(201);
    sessionId = ((await created.json()) as { id: string }).id;
    const batch = await fetch(`${base}/v1/batches`, {
      method: "POST",
      headers,
      body: JSON.stringify({ sessions: [{ agent, messages: [{ role: "user", content: "x" }] }] }),
    });
    expect(batch.status).toBe(201);
    batchId = ((await batch.json()) as { id: string }).id;
  }, 90_000);

  afterAll(async () => {
    await fleet?.close();
  });

  it("answers a tenant's data, and every error, no-store and nosniff", async () => {
    const answers: [string, Response][] = [
      ["session", await get(`/v1/sessions/${sessionId}`)],
      ["sessions", await get("/v1/sessions")],
      ["resume point", await get(`/v1/sessions/${sessionId}/resume-point`)],
      ["batch", await get(`/v1/batches/${batchId}`)],
      ["batch results", await get(`/v1/batches/${batchId}/results`)],
      ["not found", await get("/v1/sessions/nope")],
      ["no route", await get("/v1/%3Cscript%3E")],
      ["no key", await get("/v1/sessions", {})],
      ["bad percent-encoding", await get("/v1/sessions/%ZZ")],
      ["id over 100 characters", await get(`/v1/sessions/${"s".repeat(101)}`)],
    ];
    for (const [what, answer] of answers) {
      await answer.arrayBuffer();
      expect({ what, cache: answer.headers.get("cache-control") }).toEqual({ what, cache: "no-store" });
      expect({ what, sniff: answer.headers.get("x-content-type-options") }).toEqual({
        what,
        sniff: "nosniff",
      });
    }
  }, 60_000);

  it("answers an event stream no-store and nosniff", async () => {
    const controller = new AbortController();
    const answer = await fetch(`${base}/v1/sessions/${sessionId}/events`, {
      headers: { authorization: `Bearer ${key}` },
      signal: controller.signal,
    });
    controller.abort();
    expect(answer.headers.get("content-type")).toMatch(/^text\/event-stream/);
    expect(answer.headers.get("cache-control")).toBe("no-store, no-transform");
    expect(answer.headers.get("x-content-type-options")).toBe("nosniff");
  }, 60_000);

  it("keeps the console page's no-cache and its assets' long cache", async () => {
    const page = await get("/console", {});
    const html = await page.text();
    expect(page.headers.get("cache-control")).toBe("no-cache");
    const asset = /src="(\/console\/assets\/[^"]+\.js)"/.exec(html)?.[1];
    expect(asset).toBeDefined();
    const script = await get(asset!, {});
    await script.arrayBuffer();
    expect(script.status).toBe(200);
    expect(script.headers.get("cache-control")).toBe("public, max-age=31536000, immutable");
    expect(script.headers.get("x-content-type-options")).toBe("nosniff");
  }, 60_000);
});
