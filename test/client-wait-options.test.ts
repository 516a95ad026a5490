/**
 * The waits of `waitForRun` and the client's `maxLimitWaitMs` that are not a number of
 * milliseconds ≥ 0 (a `Number(process.env.X)` left unset is NaN), refused with a TypeError
 * naming the option before any request, as `events()` refuses its own
 * (`test/client-events-options.test.ts`). Before: `intervalMs: NaN` polled the run every
 * millisecond (setTimeout(NaN)), hundreds of requests a second until the timeout;
 * `timeoutMs: NaN` never timed out (a NaN deadline), so a run that never ended was waited for
 * for ever, not the default minute; `maxLimitWaitMs: NaN` sent a call refused with 429 again,
 * after each Retry-After, for ever (no wait is more than NaN).
 */
import { createServer } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetClient } from "../src/producer/client.js";

describe("the client's waits", () => {
  let requests = 0;
  // A run that never ends; every other call over a limit (429, Retry-After: 1).
  const server = createServer((req, res) => {
    requests += 1;
    if (req.url?.startsWith("/v1/runs/")) {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ id: "r1", sessionId: "s1", status: "running", endedReason: null }));
      return;
    }
    res.writeHead(429, { "content-type": "application/json", "retry-after": "1" });
    res.end(JSON.stringify({ error: { code: "too_many_requests", message: "over", limit: "request_rate" } }));
  });
  let base: string;
  let client: FleetClient;
  beforeAll(async () => {
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
    client = new FleetClient({ baseUrl: base });
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  for (const [name, value] of [
    ["intervalMs", Number.NaN],
    ["intervalMs", -1],
    ["timeoutMs", Number.NaN],
  ] as const) {
    it(`waitForRun rejects ${name}: ${value} at once, asking nothing`, async () => {
      const before = requests;
      const waiting = client.waitForRun("r1", {
        timeoutMs: 1_000,
        [name]: value,
        signal: AbortSignal.timeout(3_000),
      });
      const error = await waiting.then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(String(error)).toBe(
        `TypeError: waitForRun(): ${name} must be a number of milliseconds ≥ 0, not ${value}`,
      );
      expect(requests - before).toBe(0);
    });
  }

  it("maxLimitWaitMs: NaN is refused when the client is made", async () => {
    let made: FleetClient | undefined;
    const error = (() => {
      try {
        made = new FleetClient({ baseUrl: base, maxLimitWaitMs: Number.NaN });
      } catch (e) {
        return e;
      }
    })();
    // Made anyway, its first call would wait out 429s for ever: bounded here by the signal.
    const outcome = await made
      ?.batchResults("b1", { signal: AbortSignal.timeout(2_500) })
      .next()
      .catch((e: unknown) => e);
    expect(String(error), String(outcome)).toBe(
      "TypeError: FleetClient: maxLimitWaitMs must be a number of milliseconds ≥ 0, not NaN",
    );
  });

  it("takes 0 and Infinity as they are documented", async () => {
    const noWait = new FleetClient({ baseUrl: base, maxLimitWaitMs: 0 });
    await expect(noWait.getBatch("b1")).rejects.toMatchObject({ status: 429 });
    const signal = AbortSignal.timeout(300);
    await expect(
      client.waitForRun("r1", { timeoutMs: Number.POSITIVE_INFINITY, intervalMs: 0, signal }),
    ).rejects.toThrow(/aborted/);
  });
});
