/**
 * A link to one message of a transcript (`/console/sessions/ID#seq-N`: each message's element
 * has that id), as an operator shares "look at message 1,100". The browser looks for the
 * fragment's element as the page loads, before the console has read and rendered the
 * transcript (a slice at a time), and left the page at its top: the link led to the session,
 * not to the message. The page now lands on the message once it is rendered, once. Real API,
 * Chromium.
 */
import type { Locator } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ConsoleFleet, openConsoleFleet } from "./support/console-browser.js";
import { questionsAndAnswers } from "./support/histories.js";

/** More than the first slice the page renders (transcript.tsx TRANSCRIPT_SLICE, 250). */
const TOTAL = 1_200;
const LINKED = 1_100;

/** Whether the element's top is within the window (what a person sees without scrolling). */
const inView = (locator: Locator) =>
  locator.evaluate((element) => {
    const { top } = element.getBoundingClientRect();
    return top >= 0 && top < (element.ownerDocument.defaultView?.innerHeight ?? 0);
  });

describe("a link to one message of a transcript", () => {
  let opened: ConsoleFleet;

  beforeAll(async () => {
    opened = await openConsoleFleet("consolemessagelink", { viewport: { width: 1280, height: 800 } });
  }, 90_000);
  afterAll(async () => {
    await opened?.close();
  });

  it("lands on that message once the transcript has it", async () => {
    const { page, base, client } = opened;
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "x" }] } },
      messages: questionsAndAnswers(TOTAL),
    });
    await page.goto(`${base}/console/sessions/${id}#seq-${LINKED}`);
    const linked = page.locator(`#seq-${LINKED}`);
    await linked.waitFor();
    await page.locator(`#seq-${TOTAL}`).waitFor();
    // Landed on it (it was left at the page's top, the transcript's first messages in view).
    await expect.poll(() => inView(linked), { timeout: 20_000 }).toBe(true);
    expect(await inView(page.locator("#seq-1"))).toBe(false);
    expect(await page.locator("html").evaluate((html) => html.scrollTop)).toBeGreaterThan(0);
  }, 60_000);
});
