/**
 * The sessions list over a slow API, as an operator moves from one list to another. While the
 * next list was read, the page went on showing the previous one's sessions under the new
 * title ("Parked queue" over sessions that were not parked), said nothing of the read, and
 * its "Next page →" carried the previous list's cursor into the new filters. Now the rows of
 * another list are not shown: "Loading…" until the answer. Real API, Chromium; the slowness
 * is the browser's (the parked list's read is held until the test lets it go).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ConsoleFleet, openConsoleFleet } from "./support/console-browser.js";

describe("the sessions list while another list is read", () => {
  let opened: ConsoleFleet;

  beforeAll(async () => {
    opened = await openConsoleFleet("consolelistslow");
  }, 90_000);
  afterAll(async () => {
    await opened?.close();
  });

  it("shows none of the previous list's sessions under the new list's title", async () => {
    const { page, base, client } = opened;
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "ok" }] }, tools: [] },
      messages: [{ role: "user", content: "not parked" }],
    });
    let release = () => {};
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    await page.route(
      (url) => url.pathname === "/v1/sessions" && url.searchParams.get("status") === "parked",
      async (route) => {
        await held;
        await route.continue();
      },
    );
    await page.goto(`${base}/console`);
    const row = page.getByRole("link", { name: id });
    await row.waitFor();

    await page
      .getByRole("navigation", { name: "Console" })
      .getByRole("link", { name: "Parked queue" })
      .click();
    await page.getByRole("heading", { name: "Parked queue" }).waitFor();
    await page.getByText("Loading…").waitFor();
    expect(await row.count(), "the previous list's session under the parked queue's title").toBe(0);

    release();
    await page.getByText("No session matches these filters.").waitFor();
    expect(await row.count()).toBe(0);
    await page.unrouteAll();
  }, 60_000);
});
