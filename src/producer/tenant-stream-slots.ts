/**
 * The event streams each tenant has open on this API process (event-stream.ts): at most
 * FLEET_SSE_MAX_STREAMS_PER_TENANT, more answer `429` (`limit: "event_streams"`), so event
 * streams cannot exhaust the API; `fleet_sse_clients` counts them all.
 */
import { TooManyRequestsError } from "../shared/errors.js";
import type { EventStreamDeps } from "./event-stream-deps.js";

export class TenantStreamSlots {
  private readonly perTenant = new Map<string, number>();

  constructor(private readonly deps: Pick<EventStreamDeps, "maxStreamsPerTenant" | "metrics">) {}

  /** A slot for one more stream of the tenant (429 when it has its most); the function returned frees it, once. */
  admit(tenant: string): () => void {
    const count = this.perTenant.get(tenant) ?? 0;
    if (count >= this.deps.maxStreamsPerTenant)
      throw new TooManyRequestsError(
        "event_streams",
        5,
        `this tenant has ${count} event streams open on this API process, the most it may; close one or try again later`,
      );
    this.perTenant.set(tenant, count + 1);
    this.deps.metrics.sseClients.inc();
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = (this.perTenant.get(tenant) ?? 1) - 1;
      if (left > 0) this.perTenant.set(tenant, left);
      else this.perTenant.delete(tenant);
      this.deps.metrics.sseClients.dec();
    };
  }
}
