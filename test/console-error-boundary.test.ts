/**
 * A part of a console page that cannot be rendered — an answer of a shape the console does not
 * expect (a proxy's rewrite, another API version): a date that is not one, a message whose
 * content is not text — says what failed and leaves the rest of the page usable (an error
 * boundary: the page as a whole, a session's transcript, and each block of its messages). Before,
 * the exception escaped the render: the part was blank, with nothing said, until a reload; then
 * one message that could not be shown hid the whole transcript. Now that message alone says so. Real API,
 * Chromium; the odd answers are the browser's, rewritten from the API's.
 */
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { type ConsoleFleet, openConsoleFleet } from "./support/console-browser.js";
import { questionsAndAnswers } from "./support/histories.js";

/** A transcript of three blocks (transcript.tsx TRANSCRIPT_BLOCK, 50), message #61 the one that fails. */
const TRANSCRIPT = 120;
const BROKEN = 61;

describe("the console when a part of a page cannot be rendered", () => {
  let base: string;
  let client: FleetClient;
  let page: Page;
  let opened: ConsoleFleet;

  beforeAll(async () => {
    opened = await openConsoleFleet("consoleboundary");
    ({ base, client, page } = opened);
  }, 90_000);
  afterAll(async () => {
    await opened?.close();
  });

  it("says the page failed and why, and the console's links still work", async () => {
    const batch = await client.createBatch([
      { agent: { model: { provider: "scripted", steps: [{ text: "never run" }] } }, input: "hi" },
    ]);
    await page.route(`**/v1/batches/${batch.id}`, async (route) => {
      const answer = await route.fetch();
      const body = { ...(await answer.json()), createdAt: "not a date" };
      return route.fulfill({ response: answer, body: JSON.stringify(body) });
    });
    const errors: string[] = [];
    page.on("pageerror", (error) => errors.push(error.message));
    await page.goto(`${base}/console/batches/${batch.id}`);
    const alert = page.getByRole("alert").filter({ hasText: "This page could not be shown" });
    await alert.waitFor();
    expect(await alert.textContent()).toContain("Invalid time value");
    // The rest of the console is still there and works.
    await page.getByRole("navigation", { name: "Console" }).getByRole("link", { name: "Sessions" }).click();
    await page.getByRole("heading", { name: "Sessions" }).waitFor();
    expect(await alert.count()).toBe(0);
    expect(errors).toEqual([]);
    await page.unrouteAll();
  }, 60_000);

  it("says which message failed, and the rest of the transcript, the facts and actions stay", async () => {
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "x" }] } },
      messages: questionsAndAnswers(TRANSCRIPT),
    });
    await page.route(
      (url) => url.pathname === `/v1/sessions/${id}`,
      async (route) => {
        const answer = await route.fetch();
        const body = await answer.json();
        // A failed tool result whose content is not text (the transcript reads it as text).
        const at = body.messages.findIndex((m: { seq: number }) => m.seq === BROKEN);
        if (at >= 0)
          body.messages[at] = {
            ...body.messages[at],
            role: "tool",
            toolCallId: "c",
            name: "t",
            success: false,
            content: 42,
          };
        return route.fulfill({ response: answer, body: JSON.stringify(body) });
      },
    );
    await page.goto(`${base}/console/sessions/${id}`);
    const alert = page.getByRole("alert").filter({ hasText: `Message #${BROKEN} could not be shown` });
    await alert.waitFor();
    expect(await alert.textContent()).toMatch(/TypeError/);
    // The messages around it, in its block and after, are shown (the whole transcript was hidden).
    expect(
      await page.getByRole("alert").filter({ hasText: "The transcript could not be shown" }).count(),
    ).toBe(0);
    for (const seq of [BROKEN - 1, BROKEN + 1, TRANSCRIPT]) await page.locator(`#seq-${seq}`).waitFor();
    await page
      .locator(`#seq-${BROKEN + 1}`)
      .getByText(`answer ${(BROKEN + 1) / 2 - 1}`, { exact: true })
      .waitFor();
    await page.getByText(`question ${TRANSCRIPT / 2 - 1}`, { exact: true }).waitFor();
    // Its place in the list, under its own id (a link to it still lands there).
    expect(await page.locator(`#seq-${BROKEN}`).getAttribute("role")).toBe("listitem");
    expect(await page.getByRole("list", { name: "Messages" }).getByRole("listitem").count()).toBe(TRANSCRIPT);
    await page.getByRole("heading", { name: `Session ${id}` }).waitFor();
    await page.getByRole("heading", { name: "Actions" }).waitFor();
    await page.getByRole("button", { name: "Cancel session" }).waitFor();
    await page.getByText("Agent and metadata").waitFor();
    await page.unrouteAll();
  }, 60_000);
});
