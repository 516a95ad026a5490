/**
 * A FLEET_* variable spelled one or two letters off a real one (FLEET_TENANT_MAX_ACTIVE_SESSION
 * for …_SESSIONS, FLEET_RETENTON_DAYS): the fleet started on the default, in silence — no cap
 * on active sessions, nothing ever deleted — and the operator believed the setting was in
 * force (found by hand). Each command now says so on stderr, once, naming the variable it
 * ignored and the one meant, and goes on. A FLEET_* name near no variable (an operator's own,
 * e.g. the `apiKeyEnv` of a model endpoint) is left alone.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { misspelledVariables } from "../src/shared/config.js";
import { runFleetCli } from "./support/fleet-cli.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

describe("a FLEET_* variable one or two letters off a real one", () => {
  it("is named with the variable meant; exact names and names near none are not", () => {
    expect(
      misspelledVariables({
        FLEET_TENANT_MAX_ACTIVE_SESSION: "3",
        FLEET_RETENTON_DAYS: "7",
        FLEET_WEBHOOK_SECRETS: "x",
        FLEET_PREFIX: "fleet",
        FLEET_API_KEY: "fk_x",
        FLEET_ENDPOINT_MAX_WAIT_MS: "10",
        FLEET_OPENAI_KEY_PRODUCTION: "sk-secret",
        DATABASE_URL: "postgres://x@h/db",
      }),
    ).toEqual([
      "FLEET_RETENTON_DAYS is not a variable the fleet reads (ignored): did you mean FLEET_RETENTION_DAYS?",
      "FLEET_TENANT_MAX_ACTIVE_SESSION is not a variable the fleet reads (ignored): did you mean FLEET_TENANT_MAX_ACTIVE_SESSIONS?",
      "FLEET_WEBHOOK_SECRETS is not a variable the fleet reads (ignored): did you mean FLEET_WEBHOOK_SECRET?",
    ]);
  });

  describe("as a command starts", () => {
    let fleet: FleetEnv;
    beforeAll(async () => {
      fleet = await createFleetEnv("misspelled-variables");
    });
    afterAll(async () => {
      await fleet?.close();
    });

    it("fleet migrate says it once on stderr, without the value, and goes on", async () => {
      const result = await runFleetCli(
        ["migrate"],
        { ...fleet.env, FLEET_TENANT_MAX_ACTIVE_SESSION: "31337", FLEET_DEBUG: undefined },
        30_000,
      );
      expect(result.code, result.stderr).toBe(0);
      expect(result.stdout.trim()).toBe("migrations applied");
      expect(result.stderr.trim()).toBe(
        "fleet migrate: warning: FLEET_TENANT_MAX_ACTIVE_SESSION is not a variable the fleet reads (ignored): did you mean FLEET_TENANT_MAX_ACTIVE_SESSIONS?",
      );
    });
  });
});
