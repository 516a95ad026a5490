/**
 * `fleet_queue_jobs`: queue depths read from Redis at scrape time, by the one process that
 * exports them; a scrape goes on without them when Redis does not answer in time.
 */
import { Gauge, type Registry } from "prom-client";

/** Queue depths by queue and state, read at scrape time by the one process that exports them. */
export type QueueDepths = () => Promise<{ queue: string; state: string; count: number }[]>;

/** How long a scrape waits for the queue depths (read from Redis) before it goes without them. */
export const QUEUE_DEPTHS_TIMEOUT_MS = 1_000;

export function queueGauge(depths: QueueDepths, registers: Registry[]) {
  return new Gauge({
    name: "fleet_queue_jobs",
    help: "Jobs in each queue by state (exported by one process only; absent while Redis does not answer).",
    labelNames: ["queue", "state"] as const,
    registers,
    async collect() {
      // Redis away (or slow): the scrape goes on without this gauge rather than failing whole,
      // so the API's other series and its `up` stay (FleetApiDown is for an API that is down).
      let timer: NodeJS.Timeout | undefined;
      const read = depths();
      read.catch(() => {});
      const counts = await Promise.race([
        read,
        new Promise<null>((resolve) => {
          timer = setTimeout(() => resolve(null), QUEUE_DEPTHS_TIMEOUT_MS);
        }),
      ])
        .catch(() => null)
        .finally(() => clearTimeout(timer));
      this.reset();
      for (const { queue, state, count } of counts ?? []) this.set({ queue, state }, count);
    },
  });
}
