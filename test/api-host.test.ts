/**
 * `fleet api` with a HOST it cannot listen on: an address of no interface here, a name that
 * does not resolve (a typo, `[::1]` written as in a URL). Before, the first was named as a
 * PORT problem (`PORT: cannot listen on 10.9.9.9 …`) and the others ended with exit 1 and
 * the resolver's words alone (`fleet api: getaddrinfo ENOTFOUND 999.1.1.1`), naming no setting.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runFleetCli } from "./support/fleet-cli.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

describe("fleet api on a HOST it cannot listen on", () => {
  let fleet: FleetEnv;
  beforeAll(async () => {
    fleet = await createFleetEnv("api-host");
  });
  afterAll(async () => {
    await fleet?.close();
  });

  it("exits 2 with one line naming HOST", async () => {
    const cases: [string, string][] = [
      ["10.9.9.9", "fleet api: HOST: cannot listen on 10.9.9.9: no such address on this machine"],
      [
        "999.1.1.1",
        "fleet api: HOST: cannot listen on 999.1.1.1: no such address or host name (getaddrinfo ENOTFOUND 999.1.1.1)",
      ],
      [
        "[::1]",
        "fleet api: HOST: cannot listen on [::1]: no such address or host name (getaddrinfo ENOTFOUND [::1]); an IPv6 address goes without brackets: ::1",
      ],
    ];
    const results = await Promise.all(
      cases.map(([host]) =>
        runFleetCli(
          ["api", "--port", "0"],
          // A key, so that a HOST other than loopback is allowed to serve.
          { ...fleet.env, HOST: host, FLEET_BOOTSTRAP_KEY: "k".repeat(40), FLEET_DEBUG: undefined },
          60_000,
        ),
      ),
    );
    for (const [i, result] of results.entries()) {
      expect(result.code, result.stdout + result.stderr).toBe(2);
      expect(result.stderr.trim()).toBe(cases[i]![1]);
    }
  }, 90_000);
});
