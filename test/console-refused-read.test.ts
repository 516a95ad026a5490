/**
 * A session page whose reads the API refuses for good — a link whose id is over 100 characters
 * (`414`), a request the API will never serve (`400`, `403`) — says why and stops following the
 * session (contracts §14; "no retry loops"). Before, the read's error was shown but the page
 * went on: its event stream refused, it polled the session every second (a session read and a
 * resume-point read each time), tried the stream again every 15 polls, and so on for as long
 * as the tab stayed open, saying "live (polling every second)".
 */
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ConsoleFleet, openConsoleFleet } from "./support/console-browser.js";

describe("the console when the API refuses a session's reads for good", () => {
  let base: string;
  let page: Page;
  let opened: ConsoleFleet;

  beforeAll(async () => {
    opened = await openConsoleFleet("consolerefused");
    ({ base, page } = opened);
  }, 90_000);
  afterAll(async () => {
    await opened?.close();
  });

  it("shows the refusal and stops reading a session whose id is too long (414)", async () => {
    const id = "s".repeat(101);
    let reads = 0;
    page.on("request", (request) => {
      if (new URL(request.url()).pathname.startsWith(`/v1/sessions/${id}`)) reads++;
    });
    await page.goto(`${base}/console/sessions/${id}`);
    await page.getByRole("alert").getByText("414 invalid_request: an id in the URL is longer").waitFor();
    // The page says it follows the session no more (it polled it every second for ever).
    await page.getByText("This page reads the session no more: reload it to try again.").waitFor();
    const whenStopped = reads;
    // It polled every second: over two and a half, nothing more is read.
    await page.evaluate(() => new Promise((resolve) => setTimeout(resolve, 2_500)));
    expect(reads).toBe(whenStopped);
  }, 60_000);
});
