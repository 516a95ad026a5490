/**
 * The client behind what integrators put in front of an API: a proxy or load balancer that
 * answers some requests itself, with an HTML page (502 while the API restarts, 504). The
 * client reports those as FleetApiError with the status, not as a SyntaxError of its own.
 * Also: client methods ask what their endpoints offer.
 */
import { createServer, request, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetApiError, FleetClient } from "../src/producer/client.js";
import { zeroTotals } from "../src/shared/prices.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };
const BAD_GATEWAY = "<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>";

describe("the client behind a proxy", () => {
  let fleet: FleetEnv;
  let proxy: Server;
  let client: FleetClient;
  /** Requests the proxy answers itself with its HTML page before it forwards again. */
  let failing = 0;
  /** Requests the proxy answers itself with a 200 and no body. */
  let empty = 0;

  beforeAll(async () => {
    fleet = await createFleetEnv("client-http");
    const api = new URL((await fleet.startApi()).api.url);
    proxy = createServer((incoming, outgoing) => {
      if (empty > 0) {
        empty--;
        outgoing.writeHead(200, { "content-length": "0" }).end();
        return;
      }
      if (failing > 0) {
        failing--;
        outgoing.writeHead(502, { "content-type": "text/html" }).end(BAD_GATEWAY);
        return;
      }
      const forward = request(
        {
          host: api.hostname,
          port: api.port,
          path: incoming.url,
          method: incoming.method,
          headers: incoming.headers,
        },
        (answer) => {
          outgoing.writeHead(answer.statusCode ?? 502, answer.headers);
          answer.pipe(outgoing);
        },
      );
      incoming.pipe(forward);
    });
    await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
    client = new FleetClient({ baseUrl: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}` });
  }, 60_000);
  afterAll(async () => {
    await new Promise((resolve) => proxy?.close(resolve));
    await fleet?.close();
  });

  it("an HTML 502 of the proxy is a FleetApiError with its status, for JSON calls and results", async () => {
    const { id } = await client.createSession({ agent: AGENT });
    failing = 1;
    const error = await client.getSession(id).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(FleetApiError);
    expect(error).toMatchObject({ status: 502, code: "http_error" });
    expect((error as Error).message).toMatch(/GET \/v1\/sessions\/.+: HTTP 502/);

    const batch = await client.createBatch([{ agent: AGENT }]);
    failing = 1;
    const results = await (async () => {
      for await (const _ of client.batchResults(batch.id));
    })().catch((e: unknown) => e);
    expect(results).toBeInstanceOf(FleetApiError);
    expect(results).toMatchObject({ status: 502 });

    // Through the proxy again, the same calls work.
    expect((await client.getSession(id)).id).toBe(id);
  });

  it("listSessions sends an empty or zero filter for the API to refuse, not dropped into a wider list", async () => {
    await client.createBatch([{ agent: AGENT }]);
    for (const [filter, field] of [
      [{ batch: "" }, "batch"],
      [{ parkedReason: "" }, "parkedReason"],
      [{ status: "" }, "status"],
      [{ limit: 0 }, "limit"],
      [{ before: "" }, "before"],
    ] as const) {
      const error = await client.listSessions(filter as never).catch((e: unknown) => e);
      expect(error, field).toBeInstanceOf(FleetApiError);
      expect(error, field).toMatchObject({ status: 400, field });
    }
    expect((await client.listSessions({ limit: 1 })).sessions).toHaveLength(1);
  });

  it("a 200 with an empty body is a FleetApiError naming it, not undefined for the caller to trip on", async () => {
    empty = 1;
    const error = await client.createBatch([{ agent: AGENT }]).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(FleetApiError);
    expect(error).toMatchObject({ status: 200, code: "invalid_response" });
    expect((error as Error).message).toBe("POST /v1/batches: HTTP 200 with an empty body");
  });

  it("getBatch asks for the batch's usage as GET /v1/batches/:id?include=usage does", async () => {
    const batch = await client.createBatch([{ agent: AGENT }, { agent: AGENT }]);
    expect(await client.getBatch(batch.id)).not.toHaveProperty("usage");
    const withUsage = await client.getBatch(batch.id, { include: "usage" });
    expect(withUsage.counts.total).toBe(2);
    expect(withUsage.usage).toEqual(zeroTotals());
  });
});
