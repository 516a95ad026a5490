/**
 * Dev mode (no API key stored, loopback only: contracts §10) serves requests without a key,
 * so any web page the developer opens could drive it: a body-less `fetch(url, {method:
 * "POST", mode: "no-cors"})` needs no CORS preflight, and a cancel, a resume, a delete or a
 * secret's rotation takes no body. A request a browser marks as coming from another origin
 * (`Origin`, `Sec-Fetch-Site`) is refused 403 there; the console (same origin), curl and the
 * client (no `Origin`) are served as before, and a request with a key is not dev mode's.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { type Answer, readAnswer } from "./support/answer.js";
import { type ConsoleFleet, openConsoleFleet } from "./support/console-browser.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

describe("dev mode refuses requests from other sites", () => {
  let cf: ConsoleFleet;
  /** Another site's page: any page the developer happens to open. */
  let attacker: Server;
  let attackerPort: number;

  beforeAll(async () => {
    cf = await openConsoleFleet("devmode-xsite");
    attacker = createServer((_request, response) => {
      response.setHeader("content-type", "text/html; charset=utf-8");
      response.end("<!doctype html><title>another site</title><p>nothing to see</p>");
    });
    await new Promise<void>((resolve) => attacker.listen(0, "127.0.0.1", resolve));
    attackerPort = (attacker.address() as AddressInfo).port;
  }, 120_000);
  afterAll(async () => {
    attacker?.close();
    await cf?.close();
  });

  /** A session with a run queued (no worker takes it): what a cancel acts on. */
  async function newSession(): Promise<string> {
    const created = await call("POST", "/v1/sessions", {}, { agent: AGENT });
    expect(created.status, created.text).toBe(201);
    const sent = await call("POST", `/v1/sessions/${created.json.id}/messages`, {}, { content: "hi" });
    expect(sent.status, sent.text).toBe(202);
    expect(await statusOf(created.json.id)).not.toBe("cancelled");
    return created.json.id;
  }

  async function statusOf(id: string): Promise<string | undefined> {
    const [row] = await cf.fleet.database.sql<
      { status: string }[]
    >`select status from sessions where id = ${id}`;
    return row?.status;
  }

  function call(
    method: string,
    path: string,
    headers: Record<string, string>,
    body?: unknown,
  ): Promise<Answer> {
    return fetch(`${cf.base}${path}`, {
      method,
      headers: { ...headers, ...(body === undefined ? {} : { "content-type": "application/json" }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    }).then(readAnswer);
  }

  /** A no-cors POST from a page of `pageOrigin`, as a page the developer opened would send it. */
  async function postFromPage(pageOrigin: string, url: string): Promise<void> {
    const { page } = cf;
    await page.goto(`${pageOrigin}/`);
    await page.evaluate(async (target) => {
      await fetch(target, { method: "POST", mode: "no-cors" });
    }, url);
  }

  it("a page of another site cannot cancel a session in a real browser (no-cors POST)", async () => {
    const id = await newSession();
    const target = `${cf.base}/v1/sessions/${id}/cancel`;
    // localhost is another site than 127.0.0.1 (Sec-Fetch-Site: cross-site), and another port of
    // 127.0.0.1 another origin (same-site): neither is the API's own page.
    await postFromPage(`http://localhost:${attackerPort}`, target);
    expect(await statusOf(id), "cancelled by a page of another site").not.toBe("cancelled");
    await postFromPage(`http://127.0.0.1:${attackerPort}`, target);
    expect(await statusOf(id), "cancelled by a page of another origin").not.toBe("cancelled");
    // The console (the API's own origin) still acts.
    await cf.page.goto(`${cf.base}/console`);
    const status = await cf.page.evaluate(
      async (path) => (await fetch(path, { method: "POST" })).status,
      `/v1/sessions/${id}/cancel`,
    );
    expect(status).toBe(202);
    expect(await statusOf(id)).toBe("cancelled");
    // So does the console opened as localhost (its own origin then).
    const other = await newSession();
    await cf.page.goto(`${cf.base.replace("127.0.0.1", "localhost")}/console`);
    const fromLocalhost = await cf.page.evaluate(
      async (path) => (await fetch(path, { method: "POST" })).status,
      `/v1/sessions/${other}/cancel`,
    );
    expect(fromLocalhost).toBe(202);
    expect(await statusOf(other)).toBe("cancelled");
    // A link to the API followed from another site's page still opens (a GET: it acts on
    // nothing, and its answer goes to the person, not to the page that linked).
    const { page } = cf;
    await page.goto(`http://localhost:${attackerPort}/`);
    await page.setContent(`<a id="link" href="${cf.base}/v1/sessions/${other}">the session</a>`);
    const [opened] = await Promise.all([page.waitForNavigation(), page.click("#link")]);
    expect(opened?.status()).toBe(200);
    expect(await page.textContent("body")).toContain(other);
  });

  it("refuses a foreign Origin or Sec-Fetch-Site: cross-site with a 403 saying why, and does nothing", async () => {
    const id = await newSession();
    const batch = await call("POST", "/v1/batches", {}, { sessions: [{ agent: AGENT, input: "hi" }] });
    expect(batch.status, batch.text).toBe(201);
    const foreign: Record<string, string>[] = [
      { origin: "https://evil.example" },
      { origin: "null" },
      { origin: `http://localhost:${attackerPort}` },
      { "sec-fetch-site": "cross-site" },
      { "sec-fetch-site": "same-site" },
      { origin: cf.base, "sec-fetch-site": "cross-site" },
      // A frame of another site's page, and a form it posts (a navigation with an Origin).
      { "sec-fetch-site": "cross-site", "sec-fetch-mode": "navigate", "sec-fetch-dest": "iframe" },
      {
        "sec-fetch-site": "cross-site",
        "sec-fetch-mode": "navigate",
        "sec-fetch-dest": "document",
        origin: "https://evil.example",
      },
    ];
    for (const headers of foreign) {
      const what = JSON.stringify(headers);
      for (const [method, path] of [
        ["POST", `/v1/sessions/${id}/cancel`],
        ["POST", `/v1/sessions/${id}/resume`],
        ["POST", `/v1/batches/${batch.json.id}/cancel`],
        ["POST", "/v1/webhook-secret/rotate"],
        ["DELETE", `/v1/sessions/${id}`],
        ["GET", "/v1/sessions"],
      ] as const) {
        const answer = await call(method, path, headers);
        expect(answer.status, `${method} ${path} ${what}: ${answer.text}`).toBe(403);
        expect(answer.json.error.code).toBe("forbidden");
        expect(answer.json.error.message).toMatch(/another (site|origin)/);
        expect(answer.json.error.message).toContain("fleet keys create");
      }
    }
    expect(await statusOf(id)).not.toBe("cancelled");
    expect(await statusOf(id)).toBeDefined();
    const [row] = await cf.fleet.database.sql<{ status: string }[]>`
      select status from sessions where batch_id = ${batch.json.id}`;
    expect(row?.status).not.toBe("cancelled");
    // The admin board in dev mode too.
    expect((await call("GET", "/admin/queues", { "sec-fetch-site": "cross-site" })).status).toBe(403);
  });

  it("serves the API's own origin, a typed URL, curl and the client as before", async () => {
    const served: Record<string, string>[] = [
      {},
      { origin: cf.base },
      { "sec-fetch-site": "same-origin", origin: cf.base },
      { "sec-fetch-site": "none" },
    ];
    for (const headers of served) {
      const answer = await call("GET", "/v1/sessions", headers);
      expect(answer.status, `${JSON.stringify(headers)}: ${answer.text}`).toBe(200);
    }
    const id = await newSession();
    expect((await call("POST", `/v1/sessions/${id}/cancel`, { origin: cf.base })).status).toBe(202);
    await cf.client.cancelSession(id);
    expect(await statusOf(id)).toBe("cancelled");
    // Open routes stay open whoever asks (a dashboard's probe).
    expect((await call("GET", "/healthz", { "sec-fetch-site": "cross-site" })).status).toBe(200);
  });

  it("with a key, a request is the key's, whatever site it comes from (no cookie, no ambient authority)", async () => {
    const { key } = await new ApiKeys(cf.fleet.database).create("acme");
    try {
      const created = await call(
        "POST",
        "/v1/sessions",
        { authorization: `Bearer ${key}`, origin: "https://app.example" },
        { agent: AGENT },
      );
      expect(created.status, created.text).toBe(201);
      // No CORS: a page of another site gets no preflight through to send its key.
      const preflight = await fetch(`${cf.base}/v1/sessions`, {
        method: "OPTIONS",
        headers: { origin: "https://evil.example", "access-control-request-method": "POST" },
      });
      expect(preflight.headers.get("access-control-allow-origin")).toBeNull();
    } finally {
      await cf.fleet.database.sql`delete from api_keys`;
    }
  });
});
