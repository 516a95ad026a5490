/**
 * A client's `apiKey` that no `Authorization: Bearer KEY` header can carry (a line break, a
 * space or a tab inside it, a character outside ASCII) is refused when the client is made, with
 * a TypeError that never repeats the key; the `fleet` commands say FLEET_API_KEY on one line,
 * exit 2. Before, the first call failed with fetch's own TypeError, which quoted the whole
 * header, key and all (`Headers.append: "Bearer fk_…\r\n…" is an invalid header value.`),
 * into the caller's logs and the command's stderr. Surrounding whitespace (a key read from a
 * file with its newline) is dropped, as fetch dropped it.
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, expect, it } from "vitest";
import { FleetClient } from "../src/producer/client.js";
import { runFleetCli } from "./support/fleet-cli.js";

const SECRET = "fk_0123456789ab_S3CRETs3cretS3CRET";

describe("FleetClient's apiKey", () => {
  it.each([
    ["a line break inside", `${SECRET}\r\nX-Evil: 1`],
    ["a space inside", `${SECRET} more`],
    ["a tab inside", `${SECRET}\tmore`],
    ["a character outside ASCII", `${SECRET}\u20ac`],
    ["a Latin-1 character", `${SECRET}\u00e9`],
    ["nothing but blanks", "  \n"],
  ])("refuses a key with %s at construction, without repeating it", (_what, apiKey) => {
    let error: unknown;
    try {
      new FleetClient({ baseUrl: "http://127.0.0.1:9", apiKey });
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(TypeError);
    const message = (error as TypeError).message;
    expect(message).toMatch(/^FleetClient: apiKey /);
    expect(message).not.toContain("S3CRET");
  });

  it("sends a key read with its surrounding whitespace (a file's newline) as the key alone", async () => {
    const seen: (string | undefined)[] = [];
    const server = createServer((request, response) => {
      seen.push(request.headers.authorization);
      response.setHeader("content-type", "application/json");
      response.end(JSON.stringify({ sessions: [], nextCursor: null }));
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      const { port } = server.address() as AddressInfo;
      const client = new FleetClient({ baseUrl: `http://127.0.0.1:${port}`, apiKey: ` ${SECRET}\n` });
      await client.listSessions();
      expect(seen).toEqual([`Bearer ${SECRET}`]);
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });
});

describe("fleet commands with a FLEET_API_KEY no header can carry", () => {
  it("one line naming FLEET_API_KEY, never the key, exit 2", async () => {
    const result = await runFleetCli(["batch", "status", "b1"], {
      FLEET_API_URL: "http://127.0.0.1:9",
      FLEET_API_KEY: `${SECRET}\r\nX-Evil: 1`,
    });
    expect(result.stderr).not.toContain("S3CRET");
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/^fleet batch status: FLEET_API_KEY: [^\n]*\n$/);
  });
});
