/**
 * A DATABASE_URL or REDIS_URL whose password holds a character a URL reserves (`@ : / ? # %`),
 * pasted as it is rather than percent-encoded. The URL parser ends the host at the first `/`,
 * `?` or `#`, so `postgres://fleet:p@ss:w/o%rd#1@db:5432/agent_fleet` was refused with `its port
 * "w" is not a number` — a piece of the password, printed, and a wrong diagnosis — and
 * `postgres://fleet:1234/x@db/agent_fleet` parsed as host `fleet`, port 1234 (found by hand).
 * Now: refused when the environment is read, saying what to percent-encode, echoing nothing
 * of the URL's user information.
 */
import { describe, expect, it } from "vitest";
import { loadConfig } from "../src/shared/config.js";
import { runFleetCli } from "./support/fleet-cli.js";

const ENCODE =
  "its user name or password holds a character a URL reserves: percent-encode them " +
  "(@ %40, : %3A, / %2F, ? %3F, # %23, % %25; encodeURIComponent does it)";

describe("a password with reserved characters, not percent-encoded", () => {
  it("is refused naming the variable, saying to percent-encode, with nothing of the password", () => {
    // The message is fixed text: nothing of the URL is in it.
    const cases: [string, string][] = [
      ["DATABASE_URL", "postgres://fleet:p@ss:w/o%rd#1@db.example:5432/agent_fleet"],
      ["DATABASE_URL", "postgres://fleet:ab#cd@db.example:5432/agent_fleet"],
      ["DATABASE_URL", "postgres://fleet:1234/x@db.example/agent_fleet"],
      ["DATABASE_URL", "postgres://fleet:what?now@db.example/agent_fleet"],
      ["REDIS_URL", "redis://default:p@ss:w/o#1@cache.example:6379/0"],
      ["REDIS_URL", "redis://default:12/34@cache.example:6379"],
    ];
    for (const [name, url] of cases) {
      let thrown: unknown;
      try {
        loadConfig({ [name]: url });
      } catch (error) {
        thrown = error;
      }
      expect(thrown, url).toMatchObject({ field: name, message: `${name}: ${ENCODE}` });
    }
  });

  it("is taken percent-encoded, and with an @ in the password (the last @ ends it)", () => {
    const encoded = `postgres://fleet:${encodeURIComponent("p@ss:w/o%rd#1")}@db.example:5432/agent_fleet`;
    expect(loadConfig({ DATABASE_URL: encoded }).databaseUrl).toBe(encoded);
    expect(loadConfig({ DATABASE_URL: "postgres://fleet:p@ss@db.example/agent_fleet" }).databaseUrl).toBe(
      "postgres://fleet:p@ss@db.example/agent_fleet",
    );
    expect(loadConfig({ REDIS_URL: "redis://default:a%2Fb%23c@cache.example:6379/3" }).redisUrl).toBe(
      "redis://default:a%2Fb%23c@cache.example:6379/3",
    );
  });

  it("fleet api prints one line, exit 2, without the password", async () => {
    const result = await runFleetCli(
      ["api"],
      { DATABASE_URL: "postgres://fleet:s3cr:et/pw@127.0.0.1:5432/agent_fleet", FLEET_DEBUG: undefined },
      30_000,
    );
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr.trim()).toBe(`fleet api: DATABASE_URL: ${ENCODE}`);
    expect(result.stdout + result.stderr).not.toMatch(/s3cr|et\/pw/);
  });
});
