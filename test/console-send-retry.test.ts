/**
 * The console's "Send a message" (contracts §14) when its answer is lost: the API stored the
 * message and queued its run, but the connection broke before the page had the answer (a
 * gateway's 504 after its timeout, a connection cut). The page shows the failure and keeps the text,
 * so the operator sends it again: that second send must not store the message twice. The
 * page sends each message with an Idempotency-Key that its retries share, so the API answers
 * the retry with the first send's answer.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ApiProxy, startApiProxy } from "./support/api-proxy.js";
import { type ConsoleFleet, openConsoleFleet } from "./support/console-browser.js";

const agent = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] }, tools: [] };

describe("the console's send when its answer is lost", () => {
  let opened: ConsoleFleet;
  let proxy: ApiProxy;
  /** Sends whose answer the proxy drops (after the API answered it). */
  let dropSends = 0;
  const sentKeys: (string | undefined)[] = [];

  /** Passes the POST on and waits for the API's whole answer, then answers 504 as a proxy that gave up. */
  function answerLost(req: IncomingMessage, res: ServerResponse): void {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      const headers: Record<string, string> = { "content-type": "application/json" };
      for (const name of ["authorization", "idempotency-key"]) {
        const value = req.headers[name];
        if (typeof value === "string") headers[name] = value;
      }
      void fetch(`${opened.base}${req.url}`, { method: "POST", headers, body: Buffer.concat(chunks) })
        .then((answer) => answer.text())
        .finally(() => {
          res.writeHead(504, { "content-type": "text/html" });
          res.end("<html><body>504 Gateway Time-out</body></html>");
        });
    });
  }

  beforeAll(async () => {
    opened = await openConsoleFleet("consolesendretry");
    proxy = await startApiProxy(opened.base, (req, res, forward) => {
      if (req.method === "POST" && /\/messages$/.test(req.url ?? "")) {
        const key = req.headers["idempotency-key"];
        sentKeys.push(typeof key === "string" ? key : undefined);
        if (dropSends > 0) {
          dropSends -= 1;
          answerLost(req, res);
          return;
        }
      }
      forward();
    });
  }, 90_000);

  afterAll(async () => {
    proxy?.server.closeAllConnections();
    await new Promise((resolve) => proxy?.server.close(resolve));
    await opened?.close();
  });

  it("a message sent again after its answer was lost is stored once", async () => {
    const { client, page } = opened;
    const { id } = await client.createSession({
      agent,
      messages: [
        { role: "user", content: "hi" },
        { role: "assistant", content: "ok", stopReason: "end_turn" },
      ],
    });
    const runsBefore = (await client.getSession(id)).runs.length;
    await page.goto(`${proxy.url}/console/sessions/${id}`);
    const box = page.getByLabel("Send a message");
    await box.fill("please go on");
    dropSends = 1;
    await page.getByRole("button", { name: "Send", exact: true }).click();
    // The page says the send failed and keeps the text, to be sent again.
    await page.locator(".actions .error").waitFor();
    expect(await box.inputValue()).toBe("please go on");
    await page.getByRole("button", { name: "Send", exact: true }).click();
    await page.locator(".actions .info", { hasText: "Message sent" }).waitFor();
    expect(await box.inputValue()).toBe("");

    const session = await client.getSession(id);
    expect(session.runs.length - runsBefore).toBe(1);
    expect(sentKeys).toHaveLength(2);
    expect(sentKeys[0]).toBeTruthy();
    expect(sentKeys[1]).toBe(sentKeys[0]);

    // The next message is another: a key of its own, stored as well.
    await box.fill("please go on");
    await page.getByRole("button", { name: "Send", exact: true }).click();
    await page.locator(".actions .info", { hasText: "Message sent" }).waitFor();
    expect(sentKeys).toHaveLength(3);
    expect(sentKeys[2]).not.toBe(sentKeys[0]);
    expect((await client.getSession(id)).runs.length - runsBefore).toBe(2);
  }, 60_000);
});
