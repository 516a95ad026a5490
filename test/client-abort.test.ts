/**
 * The client's long calls against an API (or a proxy) that stops answering: `waitForRun`'s
 * `timeoutMs` bounds a poll that hangs, and `signal` stops `waitForRun`, `batchResults` and
 * `messages()` at once, closing their connection. A fake HTTP server plays the API: no fleet
 * needed.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sleep } from "../src/producer/api-transport.js";
import { FleetApiError, FleetClient } from "../src/producer/client.js";

type Handler = (request: IncomingMessage, response: ServerResponse) => void;

describe("the client's long calls stop when asked", () => {
  let server: Server;
  let client: FleetClient;
  let handler: Handler = () => {};
  /** The sockets of the requests answered so far: each must be closed once its call stops. */
  let sockets: Socket[] = [];

  beforeAll(async () => {
    server = createServer((request, response) => {
      sockets.push(request.socket);
      handler(request, response);
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    client = new FleetClient({ baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}` });
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  /** How many sockets of the requests that were left unanswered are still open (after 2 s at most). */
  const stillOpen = async (unanswered: number) => {
    const held = sockets.slice(-unanswered);
    sockets = [];
    for (let i = 0; i < 100 && held.some((s) => !s.destroyed); i++)
      await new Promise((resolve) => setTimeout(resolve, 20));
    return held.filter((s) => !s.destroyed).length;
  };

  it("waitForRun's timeoutMs bounds a poll the API never answers", async () => {
    handler = () => {}; // headers never come
    const error = await client.waitForRun("r1", { timeoutMs: 300 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Error);
    expect((error as Error).message).toContain("has not ended after 300 ms");
    expect(await stillOpen(1)).toBe(0);
  });

  it("waitForRun with a timeoutMs past setTimeout's range (a month, Infinity) keeps polling", async () => {
    // setTimeout takes at most 2^31 - 1 ms (24.8 days) and fires any longer delay after 1 ms:
    // the deadline's abort then cut the first poll and the call rejected "has not ended" at once.
    let polls = 0;
    handler = (_request, response) => {
      polls++;
      response.writeHead(200, { "content-type": "application/json" });
      response.end(JSON.stringify({ id: "r4", status: polls < 3 ? "running" : "ended" }));
    };
    for (const timeoutMs of [30 * 24 * 3600 * 1000, Number.POSITIVE_INFINITY]) {
      polls = 0;
      const run = await client.waitForRun("r4", { timeoutMs, intervalMs: 20 });
      expect(run.status).toBe("ended");
      expect(polls).toBe(3);
    }
  });

  it("waitForRun stops with its signal, while polling and while a poll hangs", async () => {
    let polls = 0;
    handler = (_request, response) => {
      polls++;
      if (polls > 2) return; // the third poll hangs
      response.writeHead(200, { "content-type": "application/json" });
      response.end(JSON.stringify({ id: "r2", status: "running" }));
    };
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error("shutting down")), 400);
    const error = await client
      .waitForRun("r2", { timeoutMs: 60_000, intervalMs: 100, signal: controller.signal })
      .catch((e: unknown) => e);
    expect((error as Error).message).toBe("shutting down");
    expect(polls).toBe(3);
    expect(await stillOpen(1)).toBe(0);
  });

  it("stream() and streamResume() stop with their signal while their POST waits out a 429 or hangs", async () => {
    // The signal was not given to the POST: an abort left it waiting out 429s for up to
    // maxLimitWaitMs (30 s), sending it again each time, so the message could be queued long
    // after the caller gave up; a POST that hung outlived an AbortSignal.timeout the same way.
    const posts: string[] = [];
    let hang = false;
    handler = (request, response) => {
      posts.push(`${request.method} ${request.url}`);
      if (hang) return; // never answered
      response.writeHead(429, { "content-type": "application/json", "retry-after": "2" });
      response.end(
        JSON.stringify({ error: { code: "too_many_requests", message: "over", limit: "request_rate" } }),
      );
    };
    const calls = [
      (signal: AbortSignal) => client.stream("s1", "hi", { signal }),
      (signal: AbortSignal) => client.streamResume("s1", { signal }),
    ];
    for (const hanging of [false, true])
      for (const call of calls) {
        hang = hanging;
        posts.length = 0;
        const started = Date.now();
        const reading = (async () => {
          for await (const event of call(AbortSignal.timeout(300))) void event;
        })();
        await expect(reading).rejects.toMatchObject({ name: "TimeoutError" });
        expect(Date.now() - started).toBeLessThan(1_500);
        expect(posts).toHaveLength(1);
        // The hung POST's connection is closed (a 429's stays in the pool for the next call).
        if (hanging) expect(await stillOpen(1)).toBe(0);
      }
  });

  it("a 503 tells its Retry-After, and is not sent again on its own (only a 429 is)", async () => {
    let asked = 0;
    handler = (_request, response) => {
      asked++;
      response.writeHead(503, { "content-type": "application/json", "retry-after": "2" });
      response.end(JSON.stringify({ error: { code: "unavailable", message: "Postgres is unreachable" } }));
    };
    const error = await client.getRun("r3").catch((e: unknown) => e);
    expect(error).toBeInstanceOf(FleetApiError);
    expect(error).toMatchObject({ status: 503, code: "unavailable", retryAfter: 2 });
    expect(asked).toBe(1);
  });

  it("batchResults and messages() stop with their signal and close the connection", async () => {
    handler = (request, response) => {
      response.writeHead(200, {
        "content-type": request.url?.includes("/results") ? "application/x-ndjson" : "application/json",
      });
      if (request.url?.includes("/results")) response.write('{"customId":"a","sessionId":"s"}\n');
      // then nothing more: a stalled stream, or an answer that never comes
    };
    const controller = new AbortController();
    const seen: string[] = [];
    const reading = (async () => {
      for await (const result of client.batchResults("b1", { signal: controller.signal }))
        seen.push(result.sessionId);
    })();
    setTimeout(() => controller.abort(new Error("stop results")), 300);
    await expect(reading).rejects.toThrow("stop results");
    expect(seen).toEqual(["s"]);
    expect(await stillOpen(1)).toBe(0);

    const pages = new AbortController();
    setTimeout(() => pages.abort(new Error("stop pages")), 300);
    const walking = (async () => {
      for await (const message of client.messages("s1", { signal: pages.signal })) void message;
    })();
    await expect(walking).rejects.toThrow("stop pages");
    expect(await stillOpen(1)).toBe(0);
  });
});

describe("the client's waits past the longest timer", () => {
  it("a wait of months (a Retry-After past 2^31-1 ms) waits, instead of ending after 1 ms", async () => {
    const controller = new AbortController();
    const long = sleep(3_000_000_000, controller.signal).then(() => "slept");
    const soon = new Promise((resolve) => setTimeout(() => resolve("still waiting"), 100));
    expect(await Promise.race([long, soon])).toBe("still waiting");
    controller.abort();
    expect(await long).toBe("slept");
  });
});
