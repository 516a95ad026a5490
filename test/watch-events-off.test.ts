/**
 * `fleet watch` on a session created with `sessionEvents: false`: the API's 409 names the HTTP
 * routes (`PATCH /v1/sessions/:id`), which a user of the command line does not send by hand.
 * The command says it in its own terms: the `fleet session events ID on` that turns the stream
 * on, and `fleet session export ID` that reads the session without one. Exit 2, as before. A
 * fake HTTP server plays the API.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { watchCommand } from "../src/commands/watch.js";

const sink = (lines: string[]) =>
  new Writable({
    write(chunk, _encoding, done) {
      lines.push(...String(chunk).split("\n").filter(Boolean));
      done();
    },
  });

describe("fleet watch on a session without an event stream", () => {
  let server: Server;
  let url: string;

  beforeAll(async () => {
    server = createServer((_request, response) => {
      response.writeHead(409, { "content-type": "application/json" });
      response.end(
        JSON.stringify({
          error: {
            code: "conflict",
            reason: "session_events_off",
            message:
              'session s1 has sessionEvents: false, so it has no event stream; follow it with GET /v1/sessions/s1 (or its batch\'s events), or turn its stream on with PATCH /v1/sessions/s1 {"sessionEvents": true}',
          },
        }),
      );
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  it("names the fleet commands that turn the stream on or read the session, exit 2", async () => {
    const out: string[] = [];
    const err: string[] = [];
    const code = await watchCommand("s1", {
      api: url,
      io: { stdout: sink(out), stderr: sink(err) },
      signal: new AbortController().signal,
    });
    expect(code).toBe(2);
    expect(out).toEqual([]);
    expect(err).toEqual([
      "fleet watch: session s1 has sessionEvents: false, so it has no event stream to follow; " +
        "turn it on with `fleet session events s1 on` (its stored messages are in the stream at once), " +
        "or read the session with `fleet session export s1` (session_events_off)",
    ]);
  }, 30_000);
});
