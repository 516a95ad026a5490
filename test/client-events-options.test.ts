/**
 * `fleet.events()` options that are not a wait (README invariant: bad input gets a clear error,
 * no retry loops). `maxReconnectDelayMs: NaN` (a `Number(process.env.X)` left unset) or a
 * negative one made every wait between reconnects `setTimeout(NaN)`, 1 ms: against an API
 * answering 502 the iterator asked again hundreds of times a second, for ever, and never said
 * why. Now the iteration rejects with a TypeError naming the option, before any request.
 */
import { createServer } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetClient } from "../src/producer/client.js";

describe("events() options", () => {
  let requests = 0;
  const server = createServer((_req, res) => {
    requests += 1;
    res.writeHead(502, { "content-type": "text/html" });
    res.end("<h1>Bad Gateway</h1>");
  });
  let client: FleetClient;
  beforeAll(async () => {
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as { port: number };
    client = new FleetClient({ baseUrl: `http://127.0.0.1:${port}` });
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  for (const [name, value] of [
    ["maxReconnectDelayMs", Number.NaN],
    ["maxReconnectDelayMs", -1],
    ["idleTimeoutMs", Number.NaN],
    ["idleTimeoutMs", -5],
  ] as const) {
    it(`rejects ${name}: ${value} at once, asking nothing`, async () => {
      const before = requests;
      const signal = AbortSignal.timeout(1_500);
      const reading = (async () => {
        for await (const _ of client.events("s", { [name]: value, signal }));
      })();
      await expect(reading).rejects.toThrow(new RegExp(`${name}`));
      await expect(reading).rejects.toBeInstanceOf(TypeError);
      expect(requests - before).toBe(0);
    });
  }

  it("takes 0 and Infinity as they are documented", async () => {
    const signal = AbortSignal.timeout(300);
    for await (const _ of client.events("s", {
      maxReconnectDelayMs: Number.POSITIVE_INFINITY,
      idleTimeoutMs: 0,
      signal,
    }));
    expect(signal.aborted).toBe(true);
  });
});
