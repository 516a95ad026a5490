/**
 * A redirect in front of the API (a load balancer that sends http:// on to https://, a base
 * URL whose path moved). fetch follows a 301, 302 or 303 of a POST as a GET of the new URL:
 * `createSession` behind one resolved with the answer of `GET /v1/sessions` (a list, no
 * `id`), creating nothing, and `send` met whatever that GET answered. The client follows no
 * redirect of a POST, PATCH or DELETE: the 3xx is a FleetApiError naming where it leads. GETs
 * (reads, event streams) still follow them. A fake HTTP server plays both: no fleet needed.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetApiError, FleetClient } from "../src/producer/client.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

describe("a redirect in front of the API", () => {
  let server: Server;
  let client: FleetClient;
  let base: string;
  /** What the server answers a request under /old/ with. */
  let redirect = 301;
  const seen: string[] = [];

  beforeAll(async () => {
    server = createServer((request, response) => {
      seen.push(`${request.method} ${request.url}`);
      const url = request.url ?? "";
      if (url.startsWith("/old/")) {
        response.writeHead(redirect, { location: `${base}/new/${url.slice(5)}` }).end();
        return;
      }
      response.writeHead(200, { "content-type": "application/json" });
      if (request.method === "GET" && url.startsWith("/new/v1/sessions/s1"))
        response.end(JSON.stringify({ id: "s1", messages: [], runs: [] }));
      else if (request.method === "GET") response.end(JSON.stringify({ sessions: [], nextCursor: null }));
      else response.end(JSON.stringify({ id: "made", runId: "r1" }));
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    client = new FleetClient({ baseUrl: `${base}/old` });
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  it("a POST, PATCH or DELETE met by a 301, 302, 303, 307 or 308 rejects naming where it leads, sent once", async () => {
    const calls: [string, () => Promise<unknown>][] = [
      ["POST", () => client.createSession({ agent: AGENT })],
      ["POST", () => client.send("s1", "hello")],
      ["POST", () => client.createBatch([{ agent: AGENT, input: "hi" }])],
      ["PATCH", () => client.setSessionEvents("s1", false)],
      ["DELETE", () => client.deleteSession("s1")],
    ];
    for (const status of [301, 302, 303, 307, 308]) {
      redirect = status;
      for (const [method, call] of calls) {
        seen.length = 0;
        const error = await call().catch((e: unknown) => e);
        expect(error, `${method} after ${status}`).toBeInstanceOf(FleetApiError);
        expect(error).toMatchObject({ status, code: "redirected" });
        expect((error as Error).message).toContain(`${base}/new/v1/`);
        expect(seen, `${method} after ${status}`).toHaveLength(1);
        expect(seen[0]?.startsWith(`${method} /old/`)).toBe(true);
      }
    }
  });

  it("a GET still follows a redirect", async () => {
    redirect = 301;
    seen.length = 0;
    expect((await client.getSession("s1")).id).toBe("s1");
    expect(seen).toEqual(["GET /old/v1/sessions/s1", "GET /new/v1/sessions/s1"]);
  });
});
