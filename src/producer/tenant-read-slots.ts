/**
 * The batch results reads (`GET /v1/batches/:id/results`, api-routes.ts) each tenant has open
 * on this API process: at most FLEET_RESULTS_MAX_READS_PER_TENANT, more answer `429`
 * (`limit: "results_reads"`). Each read holds a page of results (up to ~8 MiB of outputs) for
 * as long as its reader reads, however slowly; before, one tenant could open any number and
 * hold the API's memory (FLEET_SSE_MAX_STREAMS_PER_TENANT counts only event streams). A read's
 * place is given back when its response closes, however it ends (read to the end, its client
 * gone, cut as stalled or for a revoked key).
 */
import type { ServerResponse } from "node:http";
import { TooManyRequestsError } from "../shared/errors.js";

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

  constructor(private readonly max: number = DEFAULT_RESULTS_READS_PER_TENANT) {}

  /** Reads `tenant` has open now. */
  private open(tenant: string): number {
    return this.perTenant.get(tenant) ?? 0;
  }

  /**
   * A place for one more read of `tenant` (429 when it has its most), given back once
   * `response` closes, or by the function returned (for a read refused before it answers).
   */
  admit(tenant: string, response: ServerResponse): () => void {
    const count = this.open(tenant);
    if (!mayOpenRead(count, this.max))
      throw new TooManyRequestsError(
        "results_reads",
        RETRY_AFTER_SECONDS,
        `this tenant has ${count} batch results reads open on this API process, the most it may; finish one or try again later`,
      );
    this.perTenant.set(tenant, count + 1);
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      response.off("close", release);
      const left = this.open(tenant) - 1;
      if (left > 0) this.perTenant.set(tenant, left);
      else this.perTenant.delete(tenant);
    };
    response.on("close", release);
    // Closed before the listener was there: the event does not come again.
    if (response.destroyed) release();
    return release;
  }
}
