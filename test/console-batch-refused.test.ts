/**
 * A batch page (contracts §14: `/console/batches/:id`) whose reads the API refuses for good
 * while the batch runs — a 403 (the key may no longer read it), a 400 — says why and reads it
 * no more, as the session page does (read-retry.ts `refusedForGood`; "no retry loops"). Before,
 * the refusal was shown but the page, its batch last read as `running`, asked again every 2 s
 * for as long as the tab stayed open, each answer the same refusal. Real API (no worker: the
 * batch stays running), Chromium; the refusal is the browser's answer to the page's reads.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ConsoleFleet, openConsoleFleet } from "./support/console-browser.js";

describe("the console's batch page when the API refuses its reads for good", () => {
  let opened: ConsoleFleet;
  beforeAll(async () => {
    opened = await openConsoleFleet("consolebatchrefused");
  }, 90_000);
  afterAll(() => opened?.close());

  it("shows the refusal and reads the batch no more", async () => {
    const { client, page, base } = opened;
    const batch = await client.createBatch([
      { agent: { model: { provider: "scripted", steps: [{ text: "never run" }] } }, input: "hi" },
    ]);
    const batchPath = `/v1/batches/${batch.id}`;
    const reads: number[] = [];
    page.on("request", (request) => {
      if (new URL(request.url()).pathname === batchPath) reads.push(Date.now());
    });
    await page.goto(`${base}/console/batches/${batch.id}`);
    await page.getByRole("heading", { name: `Batch ${batch.id}` }).waitFor();
    await page.getByText("1 sessions finished").or(page.getByText("0 of 1 sessions finished")).waitFor();

    await page.route(`**${batchPath}`, (route) =>
      route.fulfill({
        status: 403,
        contentType: "application/json",
        body: JSON.stringify({ error: { code: "forbidden", message: "this key may not read batches" } }),
      }),
    );
    await page.getByRole("alert").getByText("this key may not read batches").waitFor();
    const atRefusal = reads.length;
    // Three read intervals: the page read it every 2 s before, each a 403.
    await page.waitForTimeout(6_000);
    expect(reads.length - atRefusal, "reads of the batch after its refusal").toBe(0);
    await page.getByText("This page reads the batch no more: reload it to try again.").waitFor();
  }, 60_000);
});
