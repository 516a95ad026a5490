/**
 * A receiver written as the README writes it, `verifyWebhookSignature(secret, rawBody,
 * req.headers["fleet-signature"])`, gets `false` for a request that carries no Fleet-Signature
 * (anyone can send one to its URL) or carries it as a list (a framework's repeated header), and
 * answers it 401. Before, the check threw a TypeError (`Cannot read properties of undefined
 * (reading 'split')`), so the receiver answered 500 (or crashed, without a try), and the call
 * as documented did not compile: the header parameter was a `string`, Node's header a
 * `string | string[] | undefined`.
 */
import { createServer } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { signWebhook, verifyWebhookSignature } from "../src/shared/webhook-signature.js";

const SECRET = "whsec-header";

describe("verifyWebhookSignature on a header that is not one string", () => {
  let url: string;
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      try {
        const rawBody = Buffer.concat(chunks).toString("utf8");
        const signed = verifyWebhookSignature(SECRET, rawBody, req.headers["fleet-signature"]);
        res.writeHead(signed ? 200 : 401).end();
      } catch (error) {
        res.writeHead(500).end(String(error));
      }
    });
  });
  beforeAll(async () => {
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    url = `http://127.0.0.1:${(server.address() as { port: number }).port}/hook`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  it("a receiver answers 401 to a delivery without Fleet-Signature, 200 to a signed one", async () => {
    const body = JSON.stringify({ id: "b1", status: "ended" });
    const unsigned = await fetch(url, { method: "POST", body });
    expect(`${unsigned.status} ${await unsigned.text()}`).toBe("401 ");
    const now = Math.floor(Date.now() / 1000);
    const signed = await fetch(url, {
      method: "POST",
      body,
      headers: { "fleet-signature": signWebhook(SECRET, body, now) },
    });
    expect(signed.status).toBe(200);
  });

  it("no header, a list of headers: false, never a throw", () => {
    const body = "{}";
    const header = signWebhook(SECRET, body, 1_700_000_000);
    expect(verifyWebhookSignature(SECRET, body, undefined, 300, 1_700_000_000)).toBe(false);
    expect(verifyWebhookSignature(SECRET, body, [header], 300, 1_700_000_000)).toBe(false);
    expect(verifyWebhookSignature(SECRET, body, header, 300, 1_700_000_000)).toBe(true);
  });
});
