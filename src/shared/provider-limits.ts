/**
 * Provider limits across the fleet (contracts §15): one Redis state per declared endpoint,
 * shared by every worker, changed only by its Lua scripts (each runs atomically, on
 * Redis's clock, so workers' clocks never matter).
 *
 * - Requests per minute and tokens per minute: GCRA (a theoretical arrival time, `tat`, per
 *   limit). A request is granted a slot at most `maxWaitMs` ahead, and reserves it: the
 *   worker sleeps until then and sends. Tokens are estimated before the request and the
 *   estimate is corrected by the usage that comes back (`correct`).
 * - Concurrency: a sorted set of permits scored by their expiry, each named after its tenant.
 *   A worker renews its permit while the response streams; a SIGKILLed worker's permits
 *   expire after `permitTtlMs`. When Redis loses them (FLUSHALL, an empty replica) while
 *   requests stream, renewals put them back and no new permit is granted for `permitTtlMs`
 *   (provider-limit-scripts.ts), so the bound holds through the loss. Tenants with requests waiting share `maxConcurrent` by
 *   weight: a permit that frees while a tenant below its share waits is kept for that
 *   tenant, not taken by whichever request of a big backlog asks first. The waiting
 *   requests are a sorted set (`:waiting`, member `tenant|request`, scored with when it
 *   stops counting): a request joins it when it is denied, and leaves it when it is granted,
 *   when its waiter gives up (`forget`: its run cancelled or aborted while it waited), or by
 *   itself `maxWaitMs` after its place came without it asking again (its worker was killed,
 *   its job was lost): a tenant counts as waiting exactly while one of its requests does.
 * - A 429/529/overloaded answer pauses the endpoint for every worker (`pause`) until the time
 *   it asked for: no slot is granted before it, and a request granted earlier is not sent
 *   once it is recorded (`confirm`, asked right before each request leaves).
 * - A request that cannot get a slot within `maxWaitMs` is denied with a time to come back.
 *   That time is a place on its tenant's calendar (`due:<tenant>`): one tenant's k-th
 *   waiting request comes back about k × interval × (sum of backlogged tenants' weights /
 *   its weight) from now — weighted fair queueing of returns (FLEET_TENANT_SHARES). A
 *   tenant with no backlog (a single interactive session) is eligible at once and gets the
 *   next slot: it waits at most about `maxWaitMs`, whatever another tenant has queued.
 *   Newcomers of a tenant with a backlog join the end of that tenant's calendar, so they do
 *   not jump ahead of its requests already waiting; and a tenant with a backlog books slots
 *   only `maxWaitMs / 2` ahead, so a slot within `maxWaitMs` is always left for the others.
 *
 * The scripts are in provider-limit-scripts.ts; what operators declare (an endpoint's limits,
 * tenant shares, gate tuning) is read in provider-limit-settings.ts.
 */
import { randomUUID } from "node:crypto";
import type { Redis } from "ioredis";
import { type Commands, commands } from "./provider-limit-scripts.js";
import {
  DEFAULT_GATE_TUNING,
  type EndpointLimits,
  type GateTuning,
  hasLimits,
} from "./provider-limit-settings.js";

export {
  DEFAULT_GATE_TUNING,
  type EndpointLimits,
  endpointLimitsSchema,
  type GateTuning,
  gateTuningFromEnv,
  hasLimits,
  parseTenantShares,
  shareOf,
  type TenantShares,
} from "./provider-limit-settings.js";

export type Acquired =
  /** `waitMs`: sleep this long, then send. `permit`: release it when the response ends. */
  | { granted: true; waitMs: number; permit: string }
  /** `retryInMs`: when to ask again; `reason`: what is short. */
  | { granted: false; retryInMs: number; reason: "rate" | "concurrency" };

/**
 * A granted request checked again right before it is sent (`ProviderLimits.confirm`): it may
 * go, or the endpoint was paused since its grant (`pausedMs` left), or its concurrency permit
 * lapsed while it was held up.
 */
export type Confirmed =
  | { ok: true }
  | { ok: false; reason: "paused"; pausedMs: number }
  | { ok: false; reason: "permit_lost" };

/**
 * Forgets runs' requests waiting for capacity on every endpoint with limits (they will not
 * ask again: their runs were cancelled or deleted).
 */
export function waitsForgetter(
  limits: Pick<ProviderLimits, "forget">,
  endpoints: readonly { name: string; limits?: EndpointLimits }[],
): (tenant: string, runIds: string[]) => Promise<void> {
  return async (tenant, runIds) => {
    for (const endpoint of endpoints)
      if (hasLimits(endpoint.limits)) await limits.forget(endpoint.name, tenant, runIds);
  };
}

/** The fleet-wide limits of the endpoints of one fleet (FLEET_PREFIX). */
export class ProviderLimits {
  private readonly redis: Redis & Commands;
  readonly tuning: GateTuning;
  /** Endpoints whose state this process has used: finding it gone then means Redis lost it. */
  private readonly seen = new Set<string>();

  constructor(
    redis: Redis,
    private readonly prefix: string,
    tuning: Partial<GateTuning> = {},
  ) {
    this.redis = commands(redis);
    this.tuning = { ...DEFAULT_GATE_TUNING, ...tuning };
  }

  private key(endpoint: string, part = ""): string {
    return `${this.prefix}:endpoint-limits:{${endpoint}}${part}`;
  }

  /**
   * Asks for a slot for one request of `tenant` to `endpoint`. `request` names the waiting
   * request (a run's id) so that it keeps its calendar place across hand-backs.
   */
  async acquire(input: {
    endpoint: string;
    limits: EndpointLimits;
    tenant: string;
    weight: number;
    request: string;
    estimatedTokens: number;
  }): Promise<Acquired> {
    const { endpoint, limits } = input;
    // The tenant leads the permit's name: ACQUIRE counts the permits each tenant holds.
    const permit = `${input.tenant}|${input.request}:${randomUUID()}`;
    const [granted, ms, reason] = await this.redis.fleetLimitsAcquire(
      this.key(endpoint),
      this.key(endpoint, ":permits"),
      this.key(endpoint, ":tenants"),
      this.key(endpoint, `:due:${input.request}`),
      this.key(endpoint, ":waiting"),
      permit,
      input.tenant,
      input.weight,
      this.tuning.maxWaitMs,
      limits.requestsPerMinute ? 60_000 / limits.requestsPerMinute : 0,
      limits.tokensPerMinute ? 60_000 / limits.tokensPerMinute : 0,
      Math.max(1, Math.round(input.estimatedTokens)),
      limits.maxConcurrent ?? 0,
      this.tuning.permitTtlMs,
      input.request,
      this.seen.has(endpoint) ? "1" : "0",
    );
    this.seen.add(endpoint);
    if (granted === 1) return { granted: true, waitMs: Math.max(0, Number(ms)), permit };
    return {
      granted: false,
      retryInMs: Math.max(0, Number(ms)),
      reason: Number(reason) === 2 ? "concurrency" : "rate",
    };
  }

  /** Pauses the endpoint for every worker; returns the pause applied (ms). */
  async pause(endpoint: string, retryAfterMs: number | undefined): Promise<number> {
    const ms = Math.min(this.tuning.maxPauseMs, Math.max(0, retryAfterMs ?? this.tuning.defaultPauseMs));
    return Number(await this.redis.fleetLimitsPause(this.key(endpoint), ms));
  }

  /**
   * Whether a granted request may be sent now (asked right before it is): a grant is an answer
   * from the past, and a 429 another worker got since then, recorded by `pause`, means no new
   * request to the endpoint. `permit`: the grant's, when the endpoint declares maxConcurrent
   * (renewed here when still held).
   */
  async confirm(endpoint: string, permit: string | undefined): Promise<Confirmed> {
    const [code, ms] = await this.redis.fleetLimitsConfirm(
      this.key(endpoint),
      this.key(endpoint, ":permits"),
      permit ?? "",
      this.tuning.permitTtlMs,
    );
    if (Number(code) === 1) return { ok: false, reason: "paused", pausedMs: Math.max(1, Number(ms)) };
    if (Number(code) === 2) return { ok: false, reason: "permit_lost" };
    return { ok: true };
  }

  /** Corrects the token estimate of a sent request by what the provider reported. */
  async correctTokens(endpoint: string, limits: EndpointLimits, deltaTokens: number): Promise<void> {
    if (!limits.tokensPerMinute || deltaTokens === 0) return;
    await this.redis.fleetLimitsCorrect(this.key(endpoint), (deltaTokens * 60_000) / limits.tokensPerMinute);
  }

  async renew(endpoint: string, permit: string): Promise<void> {
    await this.redis.fleetLimitsRenew(
      this.key(endpoint, ":permits"),
      this.key(endpoint),
      permit,
      this.tuning.permitTtlMs,
    );
  }

  async release(endpoint: string, permit: string): Promise<void> {
    await this.redis.zrem(this.key(endpoint, ":permits"), permit);
  }

  /** Concurrency permits held now (expired ones dropped). */
  async inUse(endpoint: string): Promise<number> {
    return Number(await this.redis.fleetLimitsInUse(this.key(endpoint, ":permits")));
  }

  /**
   * Forgets waiting requests of `tenant`: their calendar places, and their tenant's count of
   * waiting requests (they were cancelled, or aborted, while they waited).
   */
  async forget(endpoint: string, tenant: string, requests: readonly string[]): Promise<void> {
    for (let i = 0; i < requests.length; i += 500) {
      const part = requests.slice(i, i + 500);
      await this.redis.fleetLimitsForget(
        part.length + 1,
        this.key(endpoint, ":waiting"),
        ...part.map((request) => this.key(endpoint, `:due:${request}`)),
        ...part.map((request) => `${tenant}|${request}`),
      );
    }
  }

  /** The tenants with a request waiting now, each with how many (for tests and operators). */
  async waiting(endpoint: string): Promise<Map<string, number>> {
    // Redis's clock where the set is, as the scripts that score it: on a cluster a TIME of
    // its own would go to any node, whose clock may be another.
    const members = await this.redis.fleetLimitsWaiting(this.key(endpoint, ":waiting"));
    const counts = new Map<string, number>();
    for (const member of members) {
      const tenant = member.slice(0, member.indexOf("|"));
      counts.set(tenant, (counts.get(tenant) ?? 0) + 1);
    }
    return counts;
  }
}
