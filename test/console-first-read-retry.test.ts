/**
 * The console's first read of a page (a session's first page of messages, the sessions
 * list, a batch) that fails for a moment — a 503, a cut connection — is tried again, as the
 * later pages of a long transcript were (console-read-retry.test.ts): before, only those
 * later pages were, and a first read that failed showed an error until a reload, where a
 * moment later it would have worked. A read the same answer would fail again (404) is still
 * not tried again (console-read-retry.test.ts).
 */
import type { Page, Route } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { type ConsoleFleet, openConsoleFleet } from "./support/console-browser.js";
import { questionsAndAnswers } from "./support/histories.js";

const agent = { model: { provider: "scripted" as const, steps: [{ text: "x" }] } };

/**
 * Routes the reads `matches` picks: the first fails with `fail`, the second waits for
 * `release()`, then every read goes through. `reads()` counts them.
 */
async function failFirstRead(
  page: Page,
  matches: (url: URL) => boolean,
  fail: (route: Route) => Promise<void>,
) {
  let reads = 0;
  let release: () => void = () => {};
  const released = new Promise<void>((resolve) => {
    release = resolve;
  });
  await page.route(matches, async (route) => {
    reads++;
    if (reads === 1) return fail(route);
    if (reads === 2) await released;
    return route.continue();
  });
  return { reads: () => reads, release };
}

const unavailable = (route: Route) =>
  route.fulfill({
    status: 503,
    contentType: "application/json",
    body: JSON.stringify({ error: { code: "unavailable", message: "try again shortly" } }),
  });

describe("the console when its first read of a page fails for a moment", () => {
  let base: string;
  let client: FleetClient;
  let page: Page;
  let opened: ConsoleFleet;

  beforeAll(async () => {
    opened = await openConsoleFleet("consolefirstread");
    ({ base, client, page } = opened);
  }, 90_000);
  afterAll(async () => {
    await opened?.close();
  });

  it("tries a session's first read again, says so, and shows the session", async () => {
    const { id } = await client.createSession({ agent, messages: questionsAndAnswers(10) });
    const first = await failFirstRead(
      page,
      (url) => url.pathname === `/v1/sessions/${id}` && !url.searchParams.has("afterSeq"),
      unavailable,
    );
    await page.goto(`${base}/console/sessions/${id}`);
    const notice = page.locator(".read-retry");
    await notice.getByText("503 unavailable: try again shortly").waitFor();
    expect(await notice.textContent()).toContain("trying again in 1 s (attempt 2)");
    first.release();
    await page.getByText("Transcript (10 messages)").waitFor();
    expect(await notice.count()).toBe(0);
    expect(await page.locator(".error").count()).toBe(0);
    expect(first.reads()).toBe(2);
    await page.unrouteAll();
  }, 60_000);

  it("tries the sessions list's read again after a cut connection, and shows the list", async () => {
    const { id } = await client.createSession({ agent, metadata: { note: "listed" } });
    const first = await failFirstRead(
      page,
      (url) => url.pathname === "/v1/sessions",
      (route) => route.abort("connectionreset"),
    );
    await page.goto(`${base}/console`);
    const notice = page.locator(".read-retry");
    await notice.getByText("trying again in 1 s (attempt 2)").waitFor();
    first.release();
    await page.locator(`a[href="/console/sessions/${id}"]`).waitFor();
    expect(await notice.count()).toBe(0);
    expect(await page.locator(".error").count()).toBe(0);
    expect(first.reads()).toBe(2);
    await page.unrouteAll();
  }, 60_000);

  it("tries a batch's first read again, and shows its counts", async () => {
    const batch = await client.createBatch([{ agent, customId: "one" }]);
    const first = await failFirstRead(page, (url) => url.pathname === `/v1/batches/${batch.id}`, unavailable);
    await page.goto(`${base}/console/batches/${batch.id}`);
    const notice = page.locator(".read-retry");
    await notice.getByText("503 unavailable: try again shortly").waitFor();
    first.release();
    await page.locator(`progress[aria-label="sessions finished"]`).waitFor();
    expect(await notice.count()).toBe(0);
    expect(await page.locator(".error").count()).toBe(0);
    expect(first.reads()).toBe(2);
    await page.unrouteAll();
  }, 60_000);
});
