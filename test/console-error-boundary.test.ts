/**
 * A part of a console page that cannot be rendered — an answer of a shape the console does not
 * expect (a proxy's rewrite, another API version): a date that is not one, a message whose
 * content is not text — says what failed and leaves the rest of the page usable (an error
 * boundary: the page as a whole, and a session's transcript on its own). Before, the exception
 * escaped the render: the part was blank, with nothing said, until a reload. Real API,
 * Chromium; the odd answers are the browser's, rewritten from the API's.
 */
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { type ConsoleFleet, openConsoleFleet } from "./support/console-browser.js";
import { questionsAndAnswers } from "./support/histories.js";

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

  it("says the transcript failed, and the session's facts and actions stay", async () => {
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "x" }] } },
      messages: questionsAndAnswers(3),
    });
    await page.route(
      (url) => url.pathname === `/v1/sessions/${id}`,
      async (route) => {
        const answer = await route.fetch();
        const body = await answer.json();
        // A failed tool result whose content is not text (the transcript reads it as text).
        if (body.messages.length > 1)
          body.messages[1] = {
            ...body.messages[1],
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
    const alert = page.getByRole("alert").filter({ hasText: "The transcript could not be shown" });
    await alert.waitFor();
    expect(await alert.textContent()).toMatch(/TypeError/);
    await page.getByRole("heading", { name: `Session ${id}` }).waitFor();
    await page.getByRole("heading", { name: "Actions" }).waitFor();
    await page.getByRole("button", { name: "Cancel session" }).waitFor();
    await page.getByText("Agent and metadata").waitFor();
    await page.unrouteAll();
  }, 60_000);
});
