/**
 * FleetQueueBacklogStuck on the real `prometheus` scraping a real fleet every second, with the
 * shipped rule files: the API and a sweeper in-process, no worker (its target answers nothing,
 * as when every worker is gone). A session's run waits in the runs queue, nothing takes it,
 * nothing ends: the alert goes pending for queue="runs" (its `for` is 5 min; rules.test.yml
 * tests that it then fires, and that a backlog being taken, an idle fleet or slots busy with long
 * runs keep it quiet), with the number of jobs waiting. A worker then starts on that target and
 * takes the job: the alert goes. (FleetQueueBacklogGrowing may go pending meanwhile: the queue's
 * step from 0 to 1 is a positive deriv() for a while; a step alone never lasts its 10 minutes.)
 *
 * Needs the `prometheus` binary (Debian package `prometheus`): without it this test fails.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import type { RunningSweeper } from "../src/sweeper/sweeper-process.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { freePort, prometheusBinary, type RunningPrometheus } from "./support/prometheus.js";
import { instance as at, scrapedAll, scrapeFleet, startApiAndSweeper } from "./support/prometheus-fleet.js";

const INTERVAL_S = 1;

type Alert = { labels: Record<string, string>; state: string; value: string };

describe("FleetQueueBacklogStuck against a live fleet with no worker, through the real Prometheus", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let sweeper: RunningSweeper;
  let prometheus: RunningPrometheus;
  let missing: Error | undefined;
  const ports = { api: 0, sweeper: 0, worker: 0 };

  beforeAll(async () => {
    try {
      prometheusBinary("prometheus");
    } catch (error) {
      missing = error as Error; // the test fails with it: a missing binary is no reason to skip
      return;
    }
    fleet = await createFleetEnv("prombacklog");
    ({ client, apiPort: ports.api, sweeper } = await startApiAndSweeper(fleet));
    ports.sweeper = sweeper.metricsPort!;
    ports.worker = await freePort();
    prometheus = await scrapeFleet(
      { api: ports.api, workers: [ports.worker], sweeper: ports.sweeper },
      INTERVAL_S,
    );
  });

  afterAll(async () => {
    await prometheus?.stop();
    await sweeper?.stop();
    await fleet?.close();
  });

  const stuckAlerts = async () =>
    (await prometheus.api<{ alerts: Alert[] }>("/api/v1/alerts")).alerts.filter(
      (a) => a.labels.alertname === "FleetQueueBacklogStuck",
    );

  it("goes pending for a run nobody takes, and goes once a worker takes it", async () => {
    if (missing) throw missing;
    await scrapedAll(prometheus, [ports.api, ports.sweeper], "the API and the sweeper");
    // Nothing waits yet: quiet (the API's and the sweeper's fleet_runs_total are 0, no worker's).
    expect(await stuckAlerts()).toEqual([]);

    const session = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "taken at last" }] } },
    });
    const { runId } = await client.send(session.id, "go");

    let seen: Alert[] = [];
    await waitFor(
      async () => {
        seen = await stuckAlerts();
        return seen.length > 0;
      },
      20_000,
      "FleetQueueBacklogStuck pending",
    ).catch((error) => {
      throw new Error(`${(error as Error).message}: ${JSON.stringify(seen)}`);
    });
    expect(seen.map((a) => [a.labels.alertname, a.labels.queue, a.state, Number(a.value)])).toEqual([
      ["FleetQueueBacklogStuck", "runs", "pending", 1],
    ]);

    // A worker on the target nobody answered: it takes the run, which ends; nothing waits.
    await fleet.spawnWorker({}, ["--metrics-port", String(ports.worker)]);
    await client.waitForRun(runId, { timeoutMs: 30_000 });
    await scrapedAll(prometheus, [ports.worker], "the worker");
    await waitFor(
      async () => (await stuckAlerts()).length === 0,
      20_000,
      "FleetQueueBacklogStuck gone",
    ).catch(async (error) => {
      throw new Error(`${(error as Error).message}: ${JSON.stringify(await stuckAlerts())}`);
    });
    const up = await prometheus.query(`up{instance="${at(ports.worker)}"}`);
    expect(up.result.map((s) => s.value?.[1])).toEqual(["1"]);
  });
});
