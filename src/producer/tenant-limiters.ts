/**
 * The API's per-tenant limits that every API process shares through Redis (contracts §10):
 * the request rate (request-rate.ts, FLEET_TENANT_REQUESTS_PER_SECOND) and the places a tenant
 * holds open (tenant-slot-leases.ts: FLEET_RESULTS_MAX_READS_PER_TENANT, FLEET_SSE_MAX_STREAMS_PER_TENANT), each said once per
 * Redis outage while it is not applied fleet-wide.
 */
import type { Redis } from "ioredis";
import type { FleetConfig } from "../shared/config.js";
import { RequestRateLimiter } from "./request-rate.js";
import { TenantSlotLeases } from "./tenant-slot-leases.js";

type Warn = (fields: { err: unknown }, message: string) => void;

export function tenantLimiters(
  redis: Redis,
  config: Pick<FleetConfig, "prefix" | "tenantLimits" | "leaseTtlMs">,
  /** Asked for at the first outage only (the app's logger is made after the limiters). */
  warn: () => Warn,
): { rate: RequestRateLimiter | undefined; tenantSlots: TenantSlotLeases } {
  const { requestRate } = config.tenantLimits;
  const rate = requestRate
    ? new RequestRateLimiter({
        redis,
        prefix: config.prefix,
        rate: requestRate,
        onUnavailable: (error) =>
          warn()({ err: error }, "Redis unreachable: tenant request rates are not applied until it is back"),
      })
    : undefined;
  const tenantSlots = new TenantSlotLeases({
    redis,
    prefix: config.prefix,
    ttlMs: config.leaseTtlMs,
    onUnavailable: (error) =>
      warn()(
        { err: error },
        "Redis unreachable: batch results reads and event streams per tenant are counted per API process until it is back",
      ),
  });
  return { rate, tenantSlots };
}
