/**
 * An error answer (a `502` from a proxy, a `500`, a `429`) whose body never ends, or is
 * gigabytes long: a broken gateway dumping a log, or a hostile endpoint. Both SDKs read an
 * error answer's body whole (`await response.text()`) before they make their error, so the
 * worker held all of it: 1.4 GB of RSS after 20 s of one request, and past V8's longest
 * string the process died of a fatal error (`v8::String::NewFromUtf8`), every session on it
 * with it. Now the body of an error answer is read up to 64 KiB (its error message, which
 * the error keeps clipped at 2,000 characters anyway) and the connection is closed; the
 * request fails at once with the status and the body's start, judged as before.
 * Real SDKs against a local server that streams an endless body and counts what it sent.
 */
import { createServer, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { callModel } from "../src/worker/call-model.js";
import { everyFamilyAt, sayHi } from "./support/model-steps.js";

/** What the server sent of the current answer, and whether the client closed it. */
const answer = { bytes: 0, closed: false };
/** The status and content type the next answer gets. */
let status = 502;
let contentType = "text/html";
/** The body's first line, then endless filler lines. */
const FIRST_LINE = "<html><body><h1>502 Bad Gateway</h1>upstream said no</body></html>\n";
const FILLER = Buffer.alloc(64 * 1024, "<p>upstream log line</p>\n");

let url = "";
let close: () => Promise<void>;

beforeAll(async () => {
  const server = createServer((req, res: ServerResponse) => {
    req.resume();
    answer.bytes = 0;
    answer.closed = false;
    res.on("close", () => {
      answer.closed = true;
    });
    res.writeHead(status, { "content-type": contentType });
    res.write(FIRST_LINE);
    // Endless: a 64 KiB line of filler every 2 ms for as long as the client reads.
    const timer = setInterval(() => {
      if (res.destroyed) return clearInterval(timer);
      answer.bytes += FILLER.length;
      res.write(FILLER);
    }, 2);
    res.on("close", () => clearInterval(timer));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  close = () => {
    server.closeAllConnections();
    return new Promise<void>((resolve) => server.close(() => resolve()));
  };
});
afterAll(() => close());

const models = everyFamilyAt(() => url);

const POLICY = { maxAttempts: 1, baseDelayMs: 1, maxDelayMs: 1 };

describe.each(Object.keys(models) as (keyof typeof models)[])(
  "%s: an error answer with an endless body",
  (family) => {
    it.each([
      [502, "text/html"],
      [429, "text/plain"],
    ])("HTTP %i (%s): fails at once with the body's start; the rest is not read", async (code, type) => {
      status = code;
      contentType = type;
      const abort = new AbortController();
      const call = callModel(
        models[family](),
        { ...sayHi(), signal: abort.signal },
        { sleep: async () => {}, policy: POLICY },
      );
      try {
        // Before: the body was read on and on (about 30 MB a second here) and the call never returned.
        const settled = await Promise.race([
          call.then(() => true),
          new Promise((r) => setTimeout(r, 5_000, false)),
        ]);
        expect(
          settled,
          `the call did not end within 5 s; the server sent ${answer.bytes >> 20} MB of the body`,
        ).toBe(true);
        const result = await call;
        expect(result).toMatchObject({ ok: false, attempts: 1 });
        const error = result.ok ? "" : result.error;
        expect(error).toContain(String(code));
        expect(error).toContain("upstream said no");
        expect(error.length).toBeLessThan(2_100);
        // The connection was closed after at most a few MB (the socket's buffers).
        await expect.poll(() => answer.closed, { timeout: 2_000 }).toBe(true);
        expect(answer.bytes).toBeLessThan(16 * 1024 * 1024);
      } finally {
        abort.abort();
        await call.catch(() => {});
      }
    });
  },
);
