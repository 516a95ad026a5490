/**
 * FLEET_API_DRAIN_MS: after SIGTERM the API goes on serving for that long with `/healthz`
 * answering 503, then stops. Kubernetes takes a pod out of its Service while it sends it
 * SIGTERM, and a load balancer takes a backend out once its health check fails: before, the
 * API closed its port at once (every request from ~0.1 s after the signal was refused), so the
 * requests routed to it in between were dropped.
 */
import { spawn } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createFleetEnv, FLEET_BIN, type FleetEnv, waitFor } from "./support/fleet-env.js";

describe("the API's drain after SIGTERM", () => {
  let fleet: FleetEnv;
  beforeAll(async () => {
    fleet = await createFleetEnv("apidrain");
  });
  afterAll(async () => fleet?.close());

  it("serves on with /healthz at 503 for FLEET_API_DRAIN_MS, then stops with exit 0", async () => {
    const child = spawn(process.execPath, [FLEET_BIN, "api", "--port", "0"], {
      env: { ...process.env, ...fleet.env, FLEET_API_DRAIN_MS: "4000" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    child.stdout.on("data", (d) => {
      out += d;
    });
    child.stderr.on("data", (d) => {
      out += d;
    });
    const exited = new Promise<number | string>((resolve) =>
      child.on("exit", (code, signal) => resolve(signal ?? code ?? -1)),
    );
    try {
      await waitFor(
        () => /fleet api ready: (\S+)/.test(out) || child.exitCode !== null,
        60_000,
        "the API ready",
      );
      const url = /fleet api ready: (\S+)/.exec(out)![1]!;
      const ready = await fetch(`${url}/healthz`);
      expect(ready.status).toBe(200);
      await ready.text();

      child.kill("SIGTERM");
      await waitFor(
        async () => {
          const health = await fetch(`${url}/healthz`);
          await health.text();
          return health.status === 503;
        },
        10_000,
        "/healthz at 503",
      );
      // Still serving everything else, and still answering: the port is open.
      // Each body read whole: an unread body can hold its connection busy, and the API's close
      // waits for busy connections (a CI run once found it not stopped 10 s after the drain).
      const sessions = await fetch(`${url}/v1/sessions`);
      expect(sessions.status).toBe(200);
      await sessions.text();
      const metrics = await fetch(`${url}/metrics`);
      expect(metrics.status).toBe(200);
      await metrics.text();
      expect(child.exitCode).toBeNull();

      expect(await exited, out).toBe(0);
      expect(out).toMatch(/draining for 4000 ms/);
      await expect(fetch(`${url}/healthz`)).rejects.toThrow();
    } finally {
      if (child.exitCode === null) child.kill("SIGKILL");
    }
  }, 90_000);
});
