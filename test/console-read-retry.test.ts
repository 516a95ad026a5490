/**
 * The console reads a long transcript a page at a time (contracts §14). When one of those
 * reads failed — a 500, a network blip, a 429 — the page stopped reading and showed what it
 * had as the whole transcript ("Transcript (500 messages)", no "so far") until a reload or the
 * next event, which a finished session never sends. Now a failed page read is tried again,
 * 1 s later, then 2 s, … (at most 30 s), and the page says so while the transcript is not
 * complete. A read the same answer would fail again (404, 401) is not tried again.
 */
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { type ConsoleFleet, openConsoleFleet } from "./support/console-browser.js";
import { questionsAndAnswers } from "./support/histories.js";

/** Two pages of the page's first read: 500, then the rest. */
const TOTAL = 1_200;

describe("the console when a page read of a long transcript fails", () => {
  let base: string;
  let client: FleetClient;
  let page: Page;
  let opened: ConsoleFleet;

  beforeAll(async () => {
    opened = await openConsoleFleet("consoleretry");
    ({ base, client, page } = opened);
  }, 90_000);
  afterAll(async () => {
    await opened?.close();
  });

  it("tries the read again with backoff, says so, and ends with every message", async () => {
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "x" }] } },
      messages: questionsAndAnswers(TOTAL),
    });
    // The second page fails twice: a 500, then a cut connection; the third try goes through.
    let secondPageReads = 0;
    let releaseCut: () => void = () => {};
    const cutMayGo = new Promise<void>((resolve) => {
      releaseCut = resolve;
    });
    await page.route(
      (url) => url.pathname === `/v1/sessions/${id}` && url.searchParams.get("afterSeq") === "500",
      async (route) => {
        secondPageReads++;
        if (secondPageReads === 1)
          return route.fulfill({
            status: 500,
            contentType: "application/json",
            body: JSON.stringify({ error: { code: "internal", message: "the read failed" } }),
          });
        if (secondPageReads === 2) {
          await cutMayGo;
          return route.abort("connectionreset");
        }
        return route.continue();
      },
    );
    await page.goto(`${base}/console/sessions/${id}`);
    const notice = page.locator(".transcript-retry");
    await notice.getByText("500 internal: the read failed").waitFor();
    expect(await notice.textContent()).toContain("trying again in 1 s (attempt 2)");
    // Never shown as complete meanwhile.
    await page.getByText("Transcript (500 messages so far)").waitFor();
    releaseCut();
    await notice.getByText("(attempt 3)").waitFor();
    expect(await notice.textContent()).toContain("trying again in 2 s");
    await page.getByText(`Transcript (${TOTAL} messages)`).waitFor();
    await expect.poll(() => page.locator(".transcript .msg").count(), { timeout: 20_000 }).toBe(TOTAL);
    expect(await notice.count()).toBe(0);
    expect(secondPageReads).toBe(3);
    await page.unrouteAll();
  }, 90_000);

  it("does not try again a read whose answer would be the same (404)", async () => {
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "x" }] } },
      messages: questionsAndAnswers(TOTAL),
    });
    let secondPageReads = 0;
    await page.route(
      (url) => url.pathname === `/v1/sessions/${id}` && url.searchParams.get("afterSeq") === "500",
      (route) => {
        secondPageReads++;
        return route.fulfill({
          status: 404,
          contentType: "application/json",
          body: JSON.stringify({ error: { code: "not_found", message: "no such session" } }),
        });
      },
    );
    await page.goto(`${base}/console/sessions/${id}`);
    await page.getByText("Session not found").waitFor();
    expect(secondPageReads).toBe(1);
    expect(await page.locator(".transcript-retry").count()).toBe(0);
    await page.unrouteAll();
  }, 60_000);
});
