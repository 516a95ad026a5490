/**
 * How often `waitForRun` asks: 50 ms apart at first, then further apart up to 1 s, so that
 * many callers waiting for long runs do not send twenty requests a second each (it polled
 * every 50 ms for as long as the run took); `intervalMs` still fixes the interval, and the
 * answer is the ended run as before. A fake HTTP server plays the API.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetClient } from "../src/index.js";
import { MAX_POLL_DELAY_MS, pollDelay } from "../src/producer/poll-delay.js";

describe("waitForRun's polls", () => {
  let server: Server;
  let client: FleetClient;
  let polls = 0;
  /** The poll (1-based) answered with the run ended; Infinity: never. */
  let endsAt = Number.POSITIVE_INFINITY;

  beforeAll(async () => {
    server = createServer((_request, response) => {
      polls++;
      const status = polls >= endsAt ? "ended" : "running";
      response.writeHead(200, { "content-type": "application/json" });
      response.end(
        JSON.stringify({
          id: "r1",
          sessionId: "s1",
          status,
          endedReason: status === "ended" ? "completed" : null,
        }),
      );
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    client = new FleetClient({ baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}` });
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  it("wait 50 ms, then half as long again each time, up to 1 s; intervalMs fixes it", () => {
    expect([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 50].map((poll) => pollDelay(poll))).toEqual([
      50, 75, 113, 169, 253, 380, 570, 854, 1000, 1000, 1000,
    ]);
    expect(MAX_POLL_DELAY_MS).toBe(1000);
    expect([0, 5, 50].map((poll) => pollDelay(poll, 200))).toEqual([200, 200, 200]);
  });

  it("a run that does not end within 3 s is asked about a dozen times, not sixty", async () => {
    polls = 0;
    endsAt = Number.POSITIVE_INFINITY;
    const error = await client.waitForRun("r1", { timeoutMs: 3_000 }).catch((e: unknown) => e);
    expect((error as Error).message).toBe("run r1 has not ended after 3000 ms");
    // 50 ms apart throughout made about 60 in 3 s; the backoff makes 10 (fewer on a slow machine).
    console.log(`waitForRun polled ${polls} times in 3 s`);
    expect(polls).toBeGreaterThan(1);
    expect(polls).toBeLessThanOrEqual(12);
  });

  it("resolves with the ended run, as before", async () => {
    polls = 0;
    endsAt = 4;
    const run = await client.waitForRun("r1", { timeoutMs: 10_000 });
    expect(run).toEqual({ id: "r1", sessionId: "s1", status: "ended", endedReason: "completed" });
    expect(polls).toBe(4);
  });
});
