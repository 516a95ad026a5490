/**
 * A session page whose event stream the API refuses with a 429 (too many streams for the
 * tenant, FLEET_SSE_MAX_STREAMS_PER_TENANT; or a gateway's rate limit) and a Retry-After. The
 * page polls meanwhile, as before, but it asked for the stream again after 15 polls whatever
 * the API had asked, and said only "live (polling every second)". It now asks again no
 * sooner than the Retry-After (bounded, as the console's other reads: retry-wait.ts), and says
 * the stream was refused, why, and when it is asked for again. Real API, Chromium; the
 * refusal is the browser's.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MAX_RETRY_AFTER_MS, streamWaitMs } from "../console/src/retry-wait.js";
import { type ConsoleFleet, openConsoleFleet } from "./support/console-browser.js";

/** Longer than the 15 polls (about 15 s) after which the page asked for the stream again. */
const RETRY_AFTER_S = 20;

describe("the console when its event stream is refused with a Retry-After", () => {
  let opened: ConsoleFleet;

  beforeAll(async () => {
    opened = await openConsoleFleet("consolestreamrefused");
  }, 90_000);
  afterAll(async () => {
    await opened?.close();
  });

  it("polls, says why and when, and asks for the stream again no sooner than asked", async () => {
    const { page, base, client } = opened;
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "ok" }] }, tools: [] },
      messages: [{ role: "user", content: "hello there" }],
    });
    const asked: number[] = [];
    await page.route("**/events", (route) => {
      asked.push(Date.now());
      if (asked.length > 1) return route.continue();
      return route.fulfill({
        status: 429,
        headers: { "retry-after": String(RETRY_AFTER_S) },
        contentType: "application/json",
        body: JSON.stringify({ error: { code: "rate_limited", message: "too many event streams" } }),
      });
    });
    await page.goto(`${base}/console/sessions/${id}`);
    await page.getByText("hello there").waitFor();
    const updates = page.locator("[data-live-mode]");
    await updates.getByText("429 rate_limited: too many event streams").waitFor();
    expect(await updates.getAttribute("data-live-mode")).toBe("polling");
    expect(await updates.textContent()).toBe(
      `live (polling every second): the event stream was refused (429 rate_limited: too many event streams); trying again in ${RETRY_AFTER_S} s (attempt 2)`,
    );
    // Meanwhile the page is live by polling: a message sent (no worker runs it) queues a run.
    await client.send(id, "sent while polling");
    await page.locator("dd .badge", { hasText: /^queued$/ }).waitFor();

    await updates.getByText("live (event stream)").waitFor({ timeout: 60_000 });
    expect(asked.length).toBe(2);
    expect(asked[1]! - asked[0]!, "ms between the 429 and the next stream asked for").toBeGreaterThanOrEqual(
      RETRY_AFTER_S * 1000 - 100,
    );
    await page.unrouteAll();
  }, 120_000);
});

describe("the wait before the event stream is asked for again", () => {
  it("is the Retry-After (at least the backoff, at most 5 min), else 15 polls", () => {
    expect(streamWaitMs(2, 1_000, 429, 20)).toEqual({ ms: 20_000, asked: true });
    expect(streamWaitMs(2, 1_000, 429)).toEqual({ ms: 1_000, asked: true });
    expect(streamWaitMs(5, 1_000, 429, 1)).toEqual({ ms: 8_000, asked: true });
    expect(streamWaitMs(2, 1_000, 503, 86_400)).toEqual({ ms: MAX_RETRY_AFTER_MS, asked: true });
    expect(streamWaitMs(2, 1_000, 404)).toEqual({ ms: 15_000, asked: false });
    expect(streamWaitMs(2, 500)).toEqual({ ms: 7_500, asked: false });
  });
});
