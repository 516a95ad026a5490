/**
 * A client made with a `baseUrl` that is no http(s) URL is refused when it is made, with a
 * TypeError naming the value, instead of failing at its first call with `fetch`'s own
 * TypeError; the `fleet` commands that talk to the API say which of their inputs it was
 * (`--api`, FLEET_API_URL) on one line, exit 2.
 */
import { createServer, type Server } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetClient } from "../src/producer/client.js";
import { runFleetCli } from "./support/fleet-cli.js";

const make = (baseUrl: unknown) => () => new FleetClient({ baseUrl: baseUrl as string });

describe("FleetClient's baseUrl", () => {
  it.each([
    ["localhost:8080", '"localhost:8080"'],
    ["ftp://x", '"ftp://x"'],
    ["", '""'],
    ["127.0.0.1:3000", '"127.0.0.1:3000"'],
    ["not a url", '"not a url"'],
    [undefined, "undefined"],
    [8080, "8080 (a number)"],
  ])("refuses %j at construction, naming it", (value, named) => {
    expect(make(value)).toThrow(TypeError);
    expect(make(value)).toThrow(
      `FleetClient: baseUrl must be an http:// or https:// URL such as "http://127.0.0.1:3000"; got ${named}`,
    );
  });

  it("refuses a URL with a user name or password without repeating the secret", () => {
    let message = "";
    try {
      make("http://user:s3cret@api.example:3000")();
    } catch (error) {
      message = (error as TypeError).message;
    }
    expect(message).toContain("must not carry a user name or password");
    expect(message).toContain("api.example:3000");
    expect(message).not.toContain("s3cret");
  });

  it.each([
    ["http://127.0.0.1:3000/?token=s3cret", "http://127.0.0.1:3000/?"],
    ["http://127.0.0.1:3000/v1#x", "http://127.0.0.1:3000/v1#"],
    ["http://127.0.0.1:3000?", "http://127.0.0.1:3000?"],
  ])("refuses %j, whose query or fragment every call's path would have been appended to", (value, shown) => {
    expect(make(value)).toThrow(TypeError);
    expect(make(value)).toThrow(
      `FleetClient: baseUrl must not carry a query (?…) or fragment (#…): each call adds its path after it; got "${shown}…"`,
    );
  });

  it("takes http and https URLs, with a path and trailing slashes", () => {
    for (const url of ["http://127.0.0.1:3000", "https://fleet.example/api/", "HTTP://Host:1//"])
      expect(make(url)).not.toThrow();
  });
});

describe("fleet commands with an API URL that is no http(s) URL", () => {
  it("--api: one line naming the flag and the value, exit 2", async () => {
    const result = await runFleetCli(["batch", "status", "b1", "--api", "localhost:8080"], {});
    expect(result.code).toBe(2);
    expect(result.stderr).toBe(
      'fleet batch status: --api: must be an http:// or https:// URL such as "http://127.0.0.1:3000"; got "localhost:8080"\n',
    );
  });

  it("FLEET_API_URL: named likewise", async () => {
    const result = await runFleetCli(["session", "delete", "s1"], { FLEET_API_URL: "ftp://x" });
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(
      /^fleet session delete: FLEET_API_URL: must be an http:\/\/ or https:\/\/ URL .*got "ftp:\/\/x"\n$/,
    );
  });
});

/**
 * A baseUrl (or FLEET_API_URL, `--api`) that ends in the API's version prefix, `/v1` or `/v1/`
 * (what the README's curl lines and an OpenAI-style `…/v1` suggest), names the same API as one
 * without it: the client adds `/v1` itself, and sent `/v1/v1/sessions` (a 404) before. A path
 * before it (an API behind a proxy at `/fleet`) is kept.
 */
describe("a baseUrl ending in /v1", () => {
  // Answers every request with a JSON body and records the path it was sent to.
  const paths: string[] = [];
  const server: Server = createServer((request, response) => {
    paths.push(request.url ?? "");
    response.writeHead(200, { "content-type": "application/json" });
    response.end(JSON.stringify({ id: "s1", deleted: true }));
  });
  let origin = "";
  beforeAll(async () => {
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    origin = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  });
  afterAll(() => {
    server.close();
  });

  it.each([
    ["", "/v1/sessions/s1"],
    ["/", "/v1/sessions/s1"],
    ["/v1", "/v1/sessions/s1"],
    ["/v1/", "/v1/sessions/s1"],
    ["/v1//", "/v1/sessions/s1"],
    ["/fleet/v1/", "/fleet/v1/sessions/s1"],
    ["/fleet/", "/fleet/v1/sessions/s1"],
  ])("the client with baseUrl ORIGIN%s sends to %s", async (suffix, path) => {
    paths.length = 0;
    await new FleetClient({ baseUrl: `${origin}${suffix}` }).deleteSession("s1");
    expect(paths).toEqual([path]);
  });

  it("fleet commands with FLEET_API_URL or --api ending in /v1/ send to /v1/… once", async () => {
    paths.length = 0;
    const fromEnv = await runFleetCli(["session", "delete", "s1"], { FLEET_API_URL: `${origin}/v1/` });
    expect(fromEnv.stderr).toBe("");
    expect(fromEnv.code).toBe(0);
    const fromFlag = await runFleetCli(["session", "delete", "s1", "--api", `${origin}/v1`], {});
    expect(fromFlag.stderr).toBe("");
    expect(fromFlag.code).toBe(0);
    expect(paths).toEqual(["/v1/sessions/s1", "/v1/sessions/s1"]);
  });

  // Blanks around it (pasted, read from a file, `--api "$URL "`) passed the check, which reads
  // it as the URL parser does (it drops them), and then every call failed with fetch's words:
  // `Failed to parse URL from  http://… /v1/sessions/s1`, exit 1. They are dropped now.
  it("a baseUrl with blanks around it names the same API", async () => {
    paths.length = 0;
    await new FleetClient({ baseUrl: ` ${origin} ` }).deleteSession("s1");
    await new FleetClient({ baseUrl: `\t${origin}/v1/ \r\n` }).deleteSession("s1");
    const fromFlag = await runFleetCli(["session", "delete", "s1", "--api", `${origin} `], {});
    expect([fromFlag.code, fromFlag.stderr]).toEqual([0, ""]);
    const fromEnv = await runFleetCli(["session", "delete", "s1"], { FLEET_API_URL: ` ${origin}` });
    expect([fromEnv.code, fromEnv.stderr]).toEqual([0, ""]);
    expect(paths).toEqual(Array(4).fill("/v1/sessions/s1"));
  });
});

/**
 * Without --api or FLEET_API_URL the commands reach http://127.0.0.1:$PORT. A PORT that is no
 * port is named as what it is; before, the line said PORT "must be an http:// or https:// URL
 * … got "http://127.0.0.1:abc"", a URL the user never wrote.
 */
describe("fleet commands with a PORT that is no port", () => {
  it.each(["abc", "70000", "3000/v1"])(
    "PORT=%s: one line naming PORT and its value, exit 2",
    async (port) => {
      const result = await runFleetCli(["batch", "status", "b1"], { PORT: port, FLEET_API_URL: undefined });
      expect(result.stderr).toBe(
        `fleet batch status: PORT: expected a port from 0 to 65535 (the API is reached at http://127.0.0.1:$PORT when neither --api nor FLEET_API_URL is set); got ${JSON.stringify(port)}\n`,
      );
      expect(result.code).toBe(2);
    },
  );
});
