/**
 * A batch page (contracts §14: `/console/batches/:id`) whose batch is deleted while it runs
 * says so and stops reading it. The page reads a running batch every 2 s; a read answered 404
 * showed "Batch not found", but the batch as last read was still `running`, so the reads went
 * on every 2 s for as long as the tab stayed open, each a 404. Real API (no worker: the batch
 * stays running), Chromium; the page's reads of the batch are counted. It then offers a way
 * back to the sessions, as a session's page does when the session is not found.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ConsoleFleet, openConsoleFleet } from "./support/console-browser.js";

describe("the console's batch page when the batch is deleted", () => {
  let opened: ConsoleFleet;
  beforeAll(async () => {
    opened = await openConsoleFleet("consolebatchdeleted");
  }, 90_000);
  afterAll(() => opened?.close());

  it("shows the batch as not found and reads it no more", async () => {
    const { client, page, base } = opened;
    const batch = await client.createBatch([
      { agent: { model: { provider: "scripted", steps: [{ text: "never run" }] } }, input: "hi" },
    ]);
    const reads: number[] = [];
    const batchPath = `/v1/batches/${batch.id}`;
    page.on("request", (request) => {
      if (new URL(request.url()).pathname === batchPath) reads.push(Date.now());
    });
    await page.goto(`${base}/console/batches/${batch.id}`);
    await page.getByRole("heading", { name: `Batch ${batch.id}` }).waitFor();
    // Read again while it runs (every 2 s).
    const first = reads.length;
    await page.waitForRequest((request) => new URL(request.url()).pathname === batchPath);
    expect(reads.length).toBeGreaterThan(first);

    await client.deleteBatch(batch.id);
    await page.getByRole("heading", { name: "Batch not found" }).waitFor();
    const atNotFound = reads.length;
    // Three read intervals: the page read it every 2 s before, each a 404.
    await page.waitForTimeout(6_000);
    expect(reads.length - atNotFound, "reads of the deleted batch after 'Batch not found'").toBe(0);
    // A way on from there, as a session not found has (the page was a dead end: the header only).
    await page.getByRole("main").getByRole("link", { name: "Back to the sessions" }).click();
    await page.getByRole("heading", { name: "Sessions" }).waitFor();
  }, 60_000);
});
