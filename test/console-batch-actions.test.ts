/**
 * The console's batch actions (contracts §14) when they fail. A failed action (a cancel met a
 * 503 while an API restarts, a download, a resume) is said on the page until the next action:
 * it was cleared by the batch's next read, every 2 s while the batch runs, so the operator
 * could miss that the cancel did not happen. "Resume parked sessions" goes a page at a time
 * (`POST /v1/batches/:id/resume` with each `nextCursor`): when a page fails, the page says how
 * many sessions the pages before it resumed; it said only the failure, as if none had been.
 * And it asks first, naming how many it would resume: one misclick resumed every parked
 * session of the batch, model calls, tools and cost.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ApiProxy, startApiProxy } from "./support/api-proxy.js";
import { type ConsoleFleet, openConsoleFleet } from "./support/console-browser.js";

const agent = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] }, tools: [] };

describe("the console's batch actions when they fail", () => {
  let opened: ConsoleFleet;
  let proxy: ApiProxy;
  let resumePages = 0;
  let batchReads = 0;

  beforeAll(async () => {
    opened = await openConsoleFleet("consolebatchactions");
    proxy = await startApiProxy(opened.base, (req, res, forward) => {
      if (req.method === "GET" && /^\/v1\/batches\/[^/?]+$/.test(req.url ?? "")) batchReads += 1;
      if (req.method === "POST" && /\/cancel$/.test(req.url ?? "")) {
        res.writeHead(503, { "content-type": "application/json" });
        res.end(JSON.stringify({ error: { code: "unavailable", message: "the cancel met a restart" } }));
        return;
      }
      if (req.method !== "POST" || !/\/resume$/.test(req.url ?? "")) return forward();
      resumePages += 1;
      const chunks: Buffer[] = [];
      req.on("data", (chunk: Buffer) => chunks.push(chunk));
      req.on("end", () => {
        if (resumePages > 1) {
          res.writeHead(503, { "content-type": "application/json" });
          res.end(JSON.stringify({ error: { code: "unavailable", message: "the API is restarting" } }));
          return;
        }
        // One session a page, so that the pass has pages after this one.
        const body = { ...JSON.parse(Buffer.concat(chunks).toString() || "{}"), limit: 1 };
        void fetch(`${opened.base}${req.url}`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify(body),
        }).then(async (answer) => {
          res.writeHead(answer.status, { "content-type": "application/json" });
          res.end(await answer.text());
        });
      });
    });
  }, 90_000);

  afterAll(async () => {
    proxy?.server.closeAllConnections();
    await new Promise((resolve) => proxy?.server.close(resolve));
    await opened?.close();
  });

  it("keeps a failed cancel's error on the page while the batch is read again", async () => {
    const { client, page } = opened;
    // No worker: its session stays queued, the batch running (read again every 2 s).
    const batch = await client.createBatch([{ agent, input: "One." }]);
    await page.goto(`${proxy.url}/console/batches/${batch.id}`);
    await page.locator(".legend").getByText("queued: 1").waitFor();
    page.once("dialog", (dialog) => void dialog.accept());
    await page.getByRole("button", { name: "Cancel batch" }).click();
    const said = page.getByRole("alert").getByText("the cancel met a restart", { exact: false });
    await said.waitFor();
    // Two reads of the batch after the failure have answered: the error is still there.
    const reads = batchReads;
    await expect.poll(() => batchReads, { timeout: 20_000 }).toBeGreaterThan(reads + 1);
    await page.locator(".legend").getByText("queued: 1").waitFor();
    expect(await said.count()).toBe(1);
  }, 60_000);

  it("asks before it resumes a batch's parked sessions, and says how many it resumed before a page failed", async () => {
    const { client, page, fleet } = opened;
    const batch = await client.createBatch([
      { agent, messages: [{ role: "user", content: "One." }] },
      { agent, messages: [{ role: "user", content: "Two." }] },
      { agent, messages: [{ role: "user", content: "Three." }] },
    ]);
    const ids = batch.sessions.map((s) => s.id);
    // Parked as a worker parks a session the provider refused (no worker runs here).
    const { sql } = fleet.database;
    await sql`update runs set status = 'ended', ended_reason = 'failed', ended_at = now() where session_id in ${sql(ids)}`;
    await sql`update sessions set status = 'parked', parked_reason = 'provider_rejected' where id in ${sql(ids)}`;

    await page.goto(`${proxy.url}/console/batches/${batch.id}`);
    await page.locator(".legend").getByText("parked: 3").waitFor();
    const resume = page.getByRole("button", { name: "Resume parked sessions" });
    // A misclick: the page asks first, and "Cancel" in the dialog resumes nothing.
    const asked: string[] = [];
    page.once("dialog", (dialog) => {
      asked.push(dialog.message());
      void dialog.dismiss();
    });
    await resume.click();
    await expect.poll(() => asked.length).toBe(1);
    expect(asked[0]).toContain(`Resume the 3 parked sessions of batch ${batch.id}?`);
    expect(resumePages).toBe(0);
    expect((await client.getBatch(batch.id)).counts.parked).toBe(3);
    page.once("dialog", (dialog) => void dialog.accept());
    await resume.click();
    await page.getByRole("alert").getByText("the API is restarting", { exact: false }).waitFor();
    expect(resumePages).toBe(2);
    const note = page.getByRole("status").getByText(/Resumed 1 parked session before/);
    await note.waitFor();
    const resumed = await Promise.all(ids.map((id) => client.getSession(id)));
    expect(resumed.filter((s) => s.status !== "parked")).toHaveLength(1);
  }, 60_000);
});
