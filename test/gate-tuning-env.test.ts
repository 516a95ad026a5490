/**
 * The provider-limit tuning (contracts §15) is read from the environment with the rest of the
 * configuration: FLEET_ENDPOINT_MAX_WAIT_MS, _PERMIT_TTL_MS, _DEFAULT_PAUSE_MS and
 * _MAX_PAUSE_MS (the longest pause a provider's retry-after may impose on the fleet). Before,
 * the last could not be set from the environment at all: 10 min, whatever the operator said.
 */
import { expect, it } from "vitest";
import { loadConfig } from "../src/shared/config.js";

it("reads FLEET_ENDPOINT_MAX_PAUSE_MS like its neighbours", () => {
  const tuning = loadConfig({
    FLEET_ENDPOINT_MAX_WAIT_MS: "3000",
    FLEET_ENDPOINT_PERMIT_TTL_MS: "20000",
    FLEET_ENDPOINT_DEFAULT_PAUSE_MS: "7000",
    FLEET_ENDPOINT_MAX_PAUSE_MS: "60000",
  }).gateTuning;
  expect(tuning).toEqual({ maxWaitMs: 3000, permitTtlMs: 20000, defaultPauseMs: 7000, maxPauseMs: 60000 });
});

it("leaves it at its default when unset, blank or not a positive integer", () => {
  for (const value of [undefined, "", "0", "-5", "1.5", "ten"])
    expect(
      loadConfig({ FLEET_ENDPOINT_MAX_PAUSE_MS: value }).gateTuning.maxPauseMs,
      String(value),
    ).toBeUndefined();
});
