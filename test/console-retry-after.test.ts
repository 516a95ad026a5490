/**
 * The console's reads tried again after a 429 or a 503 (read-retry.ts) wait what the API's
 * `Retry-After` asks — bounded at 5 minutes — as the TypeScript client does, and never less
 * than their own backoff (1 s, doubled each try, at most 30 s). Before, the header was not read:
 * a 429 that asked for 4 s was asked again after 1 s (and 2 s after that), each too early.
 */
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MAX_RETRY_AFTER_MS, retryAfterSeconds, retryDelayMs } from "../console/src/retry-wait.js";
import type { FleetClient } from "../src/producer/client.js";
import { type ConsoleFleet, openConsoleFleet } from "./support/console-browser.js";

describe("the console's read retries and Retry-After", () => {
  let base: string;
  let client: FleetClient;
  let page: Page;
  let opened: ConsoleFleet;

  beforeAll(async () => {
    opened = await openConsoleFleet("consoleretryafter");
    ({ base, client, page } = opened);
  }, 90_000);
  afterAll(async () => {
    await opened?.close();
  });

  it("waits the Retry-After of a 429 before it reads again", async () => {
    const batch = await client.createBatch([
      { agent: { model: { provider: "scripted", steps: [{ text: "never run" }] } }, input: "hi" },
    ]);
    const reads: number[] = [];
    await page.route(`**/v1/batches/${batch.id}`, (route) => {
      reads.push(Date.now());
      if (reads.length > 1) return route.continue();
      return route.fulfill({
        status: 429,
        headers: { "retry-after": "4" },
        contentType: "application/json",
        body: JSON.stringify({ error: { code: "rate_limited", message: "slow down" } }),
      });
    });
    await page.goto(`${base}/console/batches/${batch.id}`);
    const notice = page.locator(".read-retry");
    await notice.getByText("429 rate_limited: slow down").waitFor();
    expect(await notice.textContent()).toContain("trying again in 4 s (attempt 2)");
    await page.getByText("0 of 1 sessions finished").waitFor();
    expect(reads[1]! - reads[0]!, "ms between the 429 and the read after it").toBeGreaterThanOrEqual(3_900);
    await page.unrouteAll();
  }, 60_000);

  it("waits at most 5 minutes whatever a 503 asks", async () => {
    await page.route(
      (url) => url.pathname === "/v1/sessions",
      (route) =>
        route.fulfill({
          status: 503,
          headers: { "retry-after": "86400" },
          contentType: "application/json",
          body: JSON.stringify({ error: { code: "unavailable", message: "Postgres away" } }),
        }),
    );
    await page.goto(`${base}/console`);
    const notice = page.locator(".read-retry");
    await notice.getByText("503 unavailable: Postgres away").waitFor();
    expect(await notice.textContent()).toContain("trying again in 300 s (attempt 2)");
    await page.unrouteAll();
  }, 60_000);
});

describe("the wait before a read is tried again", () => {
  it("reads Retry-After as seconds or an HTTP date, and nothing else", () => {
    const now = Date.parse("2026-01-01T00:00:00Z");
    expect(retryAfterSeconds("4", now)).toBe(4);
    expect(retryAfterSeconds("0", now)).toBe(0);
    expect(retryAfterSeconds("Thu, 01 Jan 2026 00:00:10 GMT", now)).toBe(10);
    expect(retryAfterSeconds("Wed, 31 Dec 2025 23:00:00 GMT", now)).toBe(0);
    for (const unreadable of [null, "", " ", "-3", "soon"])
      expect(retryAfterSeconds(unreadable, now)).toBeUndefined();
  });

  it("is the backoff, or the longer Retry-After up to its bound", () => {
    expect(retryDelayMs(2)).toBe(1_000);
    expect(retryDelayMs(2, 4)).toBe(4_000);
    expect(retryDelayMs(2, 0.2)).toBe(1_000);
    expect(retryDelayMs(5, 1)).toBe(8_000);
    expect(retryDelayMs(2, 86_400)).toBe(MAX_RETRY_AFTER_MS);
    expect(retryDelayMs(20, undefined)).toBe(30_000);
  });
});
