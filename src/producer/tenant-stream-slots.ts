/**
 * The event streams each tenant has open (event-stream.ts): at most
 * FLEET_SSE_MAX_STREAMS_PER_TENANT across the fleet's API processes, more answer `429`
 * (`limit: "event_streams"`), so event streams cannot exhaust the API; `fleet_sse_clients`
 * counts this process's. Each stream holds a lease in Redis (tenant-slot-leases.ts), so the
 * bound holds however a load balancer spreads a tenant's streams, and a dead process's streams
 * stop counting within LEASE_TTL_MS; this process's own count applies too, the bound while
 * Redis cannot be reached.
 */
import { TooManyRequestsError } from "../shared/errors.js";
import type { EventStreamDeps } from "./event-stream-deps.js";

/** Seconds a refused stream is told to wait (Retry-After). */
const RETRY_AFTER_SECONDS = 5;

export class TenantStreamSlots {
  private readonly perTenant = new Map<string, number>();

  constructor(
    private readonly deps: Pick<EventStreamDeps, "maxStreamsPerTenant" | "metrics" | "tenantSlots">,
  ) {}

  /** A slot for one more stream of the tenant (429 when it has its most); the function returned frees it, once. */
  async admit(tenant: string): Promise<() => void> {
    const count = this.perTenant.get(tenant) ?? 0;
    const max = this.deps.maxStreamsPerTenant;
    if (count >= max) throw refusal(count);
    this.perTenant.set(tenant, count + 1);
    let released = false;
    let releaseLease = () => {};
    const release = () => {
      if (released) return;
      released = true;
      releaseLease();
      const left = (this.perTenant.get(tenant) ?? 1) - 1;
      if (left > 0) this.perTenant.set(tenant, left);
      else this.perTenant.delete(tenant);
    };
    if (this.deps.tenantSlots) {
      const lease = await this.deps.tenantSlots.take("event_streams", tenant, max).catch((error: unknown) => {
        release();
        throw error;
      });
      if (!lease.taken) {
        release();
        throw refusal(lease.held);
      }
      releaseLease = lease.release;
    }
    this.deps.metrics.sseClients.inc();
    return () => {
      if (released) return;
      release();
      this.deps.metrics.sseClients.dec();
    };
  }
}

function refusal(open: number): TooManyRequestsError {
  return new TooManyRequestsError(
    "event_streams",
    RETRY_AFTER_SECONDS,
    `this tenant has ${open} event streams open, the most it may; close one or try again later`,
  );
}
