/**
 * FLEET_API_DRAIN_MS: after SIGTERM the API goes on serving for that long with `/healthz`
 * answering 503, then stops. Kubernetes takes a pod out of its Service while it sends it
 * SIGTERM, and a load balancer takes a backend out once its health check fails: before, the
 * API closed its port at once (every request from ~0.1 s after the signal was refused), so the
 * requests routed to it in between were dropped.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { killApi, spawnApi } from "./support/api-process.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

describe("the API's drain after SIGTERM", () => {
  let fleet: FleetEnv;
  beforeAll(async () => {
    fleet = await createFleetEnv("apidrain");
  });
  afterAll(async () => fleet?.close());

  it("serves on with /healthz at 503 for FLEET_API_DRAIN_MS, then stops with exit 0", async () => {
    const api = await spawnApi(fleet, { FLEET_API_DRAIN_MS: "4000" });
    const { url } = api;
    try {
      const ready = await fetch(`${url}/healthz`);
      expect(ready.status).toBe(200);
      await ready.text();

      api.signal();
      await waitFor(
        async () => {
          const health = await fetch(`${url}/healthz`);
          await health.text();
          return health.status === 503;
        },
        10_000,
        "/healthz at 503",
      );
      // Still serving everything else, and still answering: the port is open. Each body is
      // read whole (a connection still busy when the drain ends is given 3 s more, then closed:
      // test/api-stop-clients.test.ts).
      const sessions = await fetch(`${url}/v1/sessions`);
      expect(sessions.status).toBe(200);
      await sessions.text();
      const metrics = await fetch(`${url}/metrics`);
      expect(metrics.status).toBe(200);
      await metrics.text();
      expect(api.child.exitCode).toBeNull();

      expect((await api.exited).code, api.output()).toBe(0);
      expect(api.output()).toMatch(/draining for 4000 ms/);
      await expect(fetch(`${url}/healthz`)).rejects.toThrow();
    } finally {
      killApi(api);
    }
  }, 90_000);
});
