/**
 * The batch results reads (`GET /v1/batches/:id/results`, api-routes.ts) each tenant has open
 * across the fleet's API processes: at most FLEET_RESULTS_MAX_READS_PER_TENANT, more answer `429`
 * (`limit: "results_reads"`). Each read holds a lease in Redis (tenant-slot-leases.ts), so the
 * bound holds however a load balancer spreads a tenant's reads, and a dead process's reads stop
 * counting within LEASE_TTL_MS; this process's own count applies too, the bound while Redis
 * cannot be reached. Each read holds a page of results (up to ~8 MiB of outputs) for
 * as long as its reader reads, however slowly; before, one tenant could open any number and
 * hold the API's memory (FLEET_SSE_MAX_STREAMS_PER_TENANT counts only event streams). A read's
 * place is given back when its response closes, however it ends (read to the end, its client
 * gone, cut as stalled or for a revoked key).
 */
import type { ServerResponse } from "node:http";
import { TooManyRequestsError } from "../shared/errors.js";
import type { TenantSlotLeases } from "./tenant-slot-leases.js";

/** FLEET_RESULTS_MAX_READS_PER_TENANT's default, for callers that give none. */
export const DEFAULT_RESULTS_READS_PER_TENANT = 8;
/** Seconds a refused read is told to wait (Retry-After): reads end as their readers read. */
const RETRY_AFTER_SECONDS = 5;

/** Whether a tenant with `open` reads open may open one more (pure). */
export function mayOpenRead(open: number, max: number): boolean {
  return open < max;
}

export class TenantReadSlots {
  private readonly perTenant = new Map<string, number>();

  /** `fleet`: the leases every API process counts (absent: this process's count only). */
  constructor(
    private readonly max: number = DEFAULT_RESULTS_READS_PER_TENANT,
    private readonly fleet?: Pick<TenantSlotLeases, "take">,
  ) {}

  /** Reads `tenant` has open now. */
  private open(tenant: string): number {
    return this.perTenant.get(tenant) ?? 0;
  }

  /**
   * A place for one more read of `tenant` (429 when it has its most), given back once
   * `response` closes, or by the function returned (for a read refused before it answers).
   */
  async admit(tenant: string, response: ServerResponse): Promise<() => void> {
    const count = this.open(tenant);
    if (!mayOpenRead(count, this.max)) throw refusal(count);
    this.perTenant.set(tenant, count + 1);
    let released = false;
    let releaseLease = () => {};
    const release = () => {
      if (released) return;
      released = true;
      response.off("close", release);
      releaseLease();
      const left = this.open(tenant) - 1;
      if (left > 0) this.perTenant.set(tenant, left);
      else this.perTenant.delete(tenant);
    };
    response.on("close", release);
    if (this.fleet) {
      const lease = await this.fleet.take("results_reads", tenant, this.max).catch((error: unknown) => {
        release();
        throw error;
      });
      if (!lease.taken) {
        release();
        throw refusal(lease.held);
      }
      if (released) lease.release();
      else releaseLease = lease.release;
    }
    // Closed before the listener was there: the event does not come again.
    if (response.destroyed) release();
    return release;
  }
}

function refusal(open: number): TooManyRequestsError {
  return new TooManyRequestsError(
    "results_reads",
    RETRY_AFTER_SECONDS,
    `this tenant has ${open} batch results reads open, the most it may; finish one or try again later`,
  );
}
