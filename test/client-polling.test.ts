/**
 * How often `waitForRun` asks: 50 ms apart at first, then further apart up to 1 s, so that
 * many callers waiting for long runs do not send twenty requests a second each (it polled
 * every 50 ms for as long as the run took); `intervalMs` still fixes the interval, and the
 * answer is the ended run as before. A fake HTTP server plays the API.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetClient, FleetNetworkError } from "../src/index.js";
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

  it("after the run was read, polls that meet an API restarting are asked again; a first failure is said at once", async () => {
    // Poll 1 reads the run; polls 2–5 meet a broken connection, a 503, a 502 and a 504, as
    // while an API restarts behind a proxy; poll 6 reads it ended.
    let asked = 0;
    const restarting = createServer((request, response) => {
      asked++;
      if (asked === 2) return void request.socket.destroy();
      if (asked >= 3 && asked <= 5) {
        response.writeHead([503, 502, 504][asked - 3]!, { "content-type": "application/json" });
        return void response.end(JSON.stringify({ error: { code: "unavailable", message: "restarting" } }));
      }
      const status = asked >= 6 ? "ended" : "running";
      response.writeHead(200, { "content-type": "application/json" });
      response.end(
        JSON.stringify({
          id: "r2",
          sessionId: "s2",
          status,
          endedReason: status === "ended" ? "completed" : null,
        }),
      );
    });
    await new Promise<void>((resolve) => restarting.listen(0, "127.0.0.1", resolve));
    const url = `http://127.0.0.1:${(restarting.address() as AddressInfo).port}`;
    try {
      const run = await new FleetClient({ baseUrl: url }).waitForRun("r2", {
        timeoutMs: 10_000,
        intervalMs: 10,
      });
      expect(run.status).toBe("ended");
      expect(asked).toBe(6);

      // The first poll failing is not waited out: a wrong URL or a run that is not there.
      asked = 1; // the next request is the broken connection
      const first = await new FleetClient({ baseUrl: url })
        .waitForRun("r2", { timeoutMs: 10_000, intervalMs: 10 })
        .catch((e: unknown) => e);
      expect(first).toBeInstanceOf(FleetNetworkError);
      expect(asked).toBe(2);

      // Failing until the deadline: the timeout says what the polls met.
      asked = 0;
      let broken = false;
      restarting.removeAllListeners("request");
      restarting.on("request", (request, response) => {
        asked++;
        if (broken) return void request.socket.destroy();
        broken = true;
        response.writeHead(200, { "content-type": "application/json" });
        response.end(JSON.stringify({ id: "r2", sessionId: "s2", status: "running", endedReason: null }));
      });
      const late = (await new FleetClient({ baseUrl: url })
        .waitForRun("r2", { timeoutMs: 500, intervalMs: 20 })
        .catch((e: unknown) => e)) as Error;
      expect(late.message).toMatch(
        /^run r2 has not ended after 500 ms \(the last poll failed: GET .* failed/,
      );
      expect(late.cause).toBeInstanceOf(FleetNetworkError);
      expect(asked).toBeGreaterThan(2);
    } finally {
      restarting.closeAllConnections();
      await new Promise((resolve) => restarting.close(resolve));
    }
  });
});
