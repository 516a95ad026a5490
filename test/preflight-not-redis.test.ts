/**
 * A REDIS_URL whose port holds a service that answers, but not as Redis (the fleet's own API
 * on 3000, a web server): ioredis fails on the first byte of the answer with `Unknown RESP
 * type 72 "H". Please report this.`, and the check's line said so, then told the user to
 * start a Redis on that port (which is taken), as for a port where nothing listens.
 */
import { createServer, type Server } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runFleetCli } from "./support/fleet-cli.js";

describe("a REDIS_URL at a service that answers, not as Redis", () => {
  // Answers what it is sent as a web server would (`HTTP/1.1 400 …`), and keeps the
  // connection open: the answer is read, not a reset.
  const web: Server = createServer((socket) => {
    socket.once("data", () => socket.write("HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n"));
    socket.on("error", () => {});
  });
  let url = "";

  beforeAll(async () => {
    await new Promise<void>((resolve) => web.listen(0, "127.0.0.1", resolve));
    url = `redis://127.0.0.1:${(web.address() as { port: number }).port}`;
  });
  afterAll(() => {
    web.close();
  });

  // `fleet up` and `fleet demo` check Redis before they migrate; `fleet migrate` asks Postgres
  // only (test/migrate-without-redis.test.ts).
  it("fleet up and fleet demo say that what answered is not Redis, with no 'report this' and no 'Start it'", async () => {
    const commands = [["up"], ["demo"]];
    const results = await Promise.all(
      commands.map((args) =>
        runFleetCli(
          args,
          { REDIS_URL: url, FLEET_PREFLIGHT_TIMEOUT_MS: "2000", FLEET_DEBUG: undefined },
          30_000,
        ),
      ),
    );
    for (const [i, result] of results.entries()) {
      expect(result.code, result.stdout + result.stderr).toBe(2);
      const lines = result.stderr.trim().split("\n");
      expect(lines, result.stderr).toHaveLength(1);
      expect(lines[0]).toBe(
        `fleet ${commands[i]![0]}: REDIS_URL: what answered at ${url} is not Redis (Unknown RESP type 72 "H"): is REDIS_URL's port another service's? (Redis listens on 6379 unless told otherwise)`,
      );
    }
  }, 60_000);
});
