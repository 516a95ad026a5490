/**
 * A session page whose event stream cannot be had while the API is away (contracts §14: "while
 * it runs it updates live from the events stream"): an API restarting, a network gone. The
 * page tries the stream again with backoff (up to 5 s apart), and said "connecting…" all the
 * while, as when it opens: a person watching a running session could not tell that nothing
 * reached the page any more. It now says the stream failed, why, and when it is tried again;
 * and "live (event stream)" once it is back. Real API, Chromium; the stream's requests are
 * refused in the browser (as when nothing listens on the port), the session's reads are not.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ConsoleFleet, openConsoleFleet } from "./support/console-browser.js";

describe("the console while its event stream cannot be had", () => {
  let opened: ConsoleFleet;

  beforeAll(async () => {
    opened = await openConsoleFleet("consolestreamaway");
  }, 90_000);

  afterAll(async () => {
    await opened?.close();
  });

  it("says the stream failed and when it is tried again, then that it is live again", async () => {
    const { page, base, client } = opened;
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "ok" }] }, tools: [] },
      messages: [{ role: "user", content: "hello there" }],
    });
    let away = true;
    await page.route("**/events", (route) => (away ? route.abort("connectionrefused") : route.continue()));
    await page.goto(`${base}/console/sessions/${id}`);
    await page.getByText("hello there").waitFor();
    const updates = page.locator("[data-live-mode]");
    await updates
      .getByText(/the event stream failed \(.+\); trying again in \d+ s \(attempt \d+\)/)
      .waitFor();
    expect(await updates.getAttribute("data-live-mode")).toBe("connecting");

    away = false;
    await updates.getByText("live (event stream)").waitFor();
    expect(await updates.textContent()).toBe("live (event stream)");
  }, 60_000);
});
