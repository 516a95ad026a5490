/**
 * Bull Board at /admin/queues in a real browser (headless Chromium, the operator's HTTP Basic
 * prompt answered with an admin key). The board is served on the console's origin, whose tab
 * keeps a tenant's API key in sessionStorage: every /admin answer says what the page may load
 * (a CSP as strict as the board allows), that it may not be framed, and that it is not kept;
 * the page sends no request to another host (Bull Board's page asked Google Fonts for its font,
 * telling Google the admin's address, and waiting on it where there is no Internet); and it
 * still renders the queues under that CSP with no violation reported.
 */
import type { Request, Response } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { withoutRemoteLinks } from "../src/producer/admin-board.js";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { ensureConsoleBuilt, openChromium, type TestBrowser } from "./support/console-browser.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

describe("withoutRemoteLinks", () => {
  it("drops every <link> to another host, however written, and keeps the page's own", () => {
    const page = [
      '<link href="https://fonts.googleapis.com/css2?family=X" rel="stylesheet">',
      "<LINK rel=preconnect href='//fonts.gstatic.com' crossorigin>",
      "<link rel=stylesheet href=http://cdn.example/x.css>",
      '<link href="static/css/main.css" rel="stylesheet">',
      '<link rel="icon" href="/admin/queues/static/favicon.ico">',
    ].join("\n");
    expect(withoutRemoteLinks(page)).toBe(
      '<link href="static/css/main.css" rel="stylesheet">\n<link rel="icon" href="/admin/queues/static/favicon.ico">',
    );
  });
});

describe("Bull Board in a browser", () => {
  let fleet: FleetEnv;
  let browser: TestBrowser;
  let base = "";
  let adminKey = "";
  let tenantKey = "";

  beforeAll(async () => {
    await ensureConsoleBuilt();
    fleet = await createFleetEnv("adminboardbrowser");
    base = (await fleet.startApi()).api.url;
    const keys = new ApiKeys(fleet.database);
    adminKey = (await keys.create("ops", { admin: true })).key;
    tenantKey = (await keys.create("acme")).key;
    browser = await openChromium({ httpCredentials: { username: "ops", password: adminKey } });
  }, 90_000);

  afterAll(async () => {
    await browser?.close();
    await fleet?.close();
  });

  /** Loads the board in the tab; what its page asked for and was answered, and the CSP violations it reported. */
  async function loadBoard(): Promise<{ requests: Request[]; answers: Response[]; violations: string[] }> {
    const { context, page } = browser;
    const requests: Request[] = [];
    const answers: Response[] = [];
    const onRequest = (request: Request) => requests.push(request);
    const onResponse = (response: Response) => answers.push(response);
    context.on("request", onRequest);
    context.on("response", onResponse);
    try {
      await page.addInitScript(`
        window.cspViolations = [];
        document.addEventListener("securitypolicyviolation", (e) =>
          window.cspViolations.push(e.violatedDirective + " " + e.blockedURI));
      `);
      const answer = await page.goto(`${base}/admin/queues`);
      expect(answer?.status()).toBe(200);
      // The board rendered: its queues are listed (read through its API, under the CSP).
      for (const name of ["runs", "resumes", "webhooks"])
        await page.getByRole("link", { name, exact: true }).first().waitFor();
      return { requests, answers, violations: await page.evaluate<string[]>("window.cspViolations") };
    } finally {
      context.off("request", onRequest);
      context.off("response", onResponse);
    }
  }

  it("asks no other host for anything (no Google Fonts) and renders with no CSP violation", async () => {
    const { requests, violations } = await loadBoard();
    const own = new URL(base).host;
    const elsewhere = requests
      .map((r) => r.url())
      .filter((url) => !url.startsWith("data:") && new URL(url).host !== own);
    expect(elsewhere).toEqual([]);
    expect(violations).toEqual([]);
    // The page names no other host at all (a link the CSP blocks would still be a violation).
    const html = await (await browser.page.request.get(`${base}/admin/queues`)).text();
    expect(html).not.toMatch(/fonts\.googleapis|https?:\/\//);
  }, 90_000);

  it("the page and its API answers forbid framing and caching, under a CSP with no inline script", async () => {
    const { answers } = await loadBoard();
    const pageAnswer = answers.find((a) => new URL(a.url()).pathname === "/admin/queues")!;
    const headers = await pageAnswer.allHeaders();
    const csp = headers["content-security-policy"] ?? "";
    expect(csp).toContain("default-src 'none'");
    expect(csp).toContain("frame-ancestors 'none'");
    expect(csp).toContain("connect-src 'self'");
    expect(csp).toContain("base-uri 'self'");
    expect(csp).toContain("form-action 'none'");
    expect(csp).not.toMatch(/script-src[^;]*'unsafe-(inline|eval)'/);
    expect(headers["x-frame-options"]).toBe("DENY");
    expect(headers["referrer-policy"]).toBe("no-referrer");
    expect(headers["x-content-type-options"]).toBe("nosniff");

    const apiAnswers = answers.filter((a) => new URL(a.url()).pathname.startsWith("/admin/queues/api/"));
    expect(apiAnswers.length).toBeGreaterThan(0);
    for (const answer of apiAnswers) {
      const h = await answer.allHeaders();
      expect(h["cache-control"], answer.url()).toBe("no-store");
      expect(h["x-content-type-options"], answer.url()).toBe("nosniff");
      expect(h["content-security-policy"], answer.url()).toContain("frame-ancestors 'none'");
      expect(h["x-frame-options"], answer.url()).toBe("DENY");
    }
  }, 90_000);

  it("every /admin answer carries the headers, its 401 and 403 included", async () => {
    const basic = (key: string) => `Basic ${Buffer.from(`ops:${key}`).toString("base64")}`;
    for (const [path, auth, status] of [
      ["/admin/queues", undefined, 401],
      ["/admin/queues", basic(tenantKey), 403],
      ["/admin/queues/api/queues", basic(adminKey), 200],
      ["/admin/queues/static/images/logo.svg", basic(adminKey), 200],
      ["/admin/nothing", basic(adminKey), 404],
    ] as const) {
      const answer = await fetch(`${base}${path}`, auth ? { headers: { authorization: auth } } : {});
      await answer.arrayBuffer();
      expect(answer.status, path).toBe(status);
      expect(answer.headers.get("content-security-policy"), path).toContain("frame-ancestors 'none'");
      expect(answer.headers.get("x-frame-options"), path).toBe("DENY");
      expect(answer.headers.get("referrer-policy"), path).toBe("no-referrer");
      expect(answer.headers.get("x-content-type-options"), path).toBe("nosniff");
    }
  }, 30_000);
});
