/**
 * Batch webhooks (contracts §9): the URL check at submit and one delivery (the signature:
 * webhook-signature.ts).
 *
 * A webhook is a request this server makes on behalf of a tenant, so:
 * - only `http:` and `https:` URLs, without credentials, at most 2,048 characters;
 * - `FLEET_WEBHOOK_ALLOWED_URLS` (comma-separated URL prefixes): when set, a URL must lie
 *   under one of them, compared as parsed URLs like FLEET_ALLOWED_BASE_URLS (same scheme,
 *   the same host exactly, the same port when the entry names one, the path at a segment
 *   boundary): `https://hooks.example.com` admits neither `https://hooks.example.com.evil.net`
 *   nor `https://hooks.example.comevil.net`;
 * - `FLEET_WEBHOOK_DENY_PRIVATE=1`: refuses loopback, private, link-local, CGNAT,
 *   multicast, reserved and unspecified addresses, in any notation (`[::ffff:7f00:1]` is
 *   127.0.0.1; NAT64 `64:ff9b::/96`, 6to4 `2002::/16`, Teredo `2001::/32` and IPv4-translated
 *   `::ffff:0:0/96`, which reach IPv4 addresses they embed, are refused whole) — checked at submit for literal addresses and at delivery for the address
 *   the name resolves to (the request connects to exactly that address, so a name that
 *   resolves elsewhere later cannot slip through). Off by default: fleets usually deliver
 *   inside their own network;
 * - both are applied again at each delivery, to the URL as it was stored;
 * - redirects are not followed (a 3xx is a failed attempt), answers are not read beyond
 *   their status, and each attempt times out after 10 s.
 */
import { lookup as dnsLookup, type LookupAddress } from "node:dns";
import { request as httpRequest } from "node:http";
import { request as httpsRequest } from "node:https";
import { BlockList, isIP, type LookupFunction } from "node:net";
import { type AllowedBaseUrl, isAllowedBaseUrl, parseAllowedBaseUrls } from "./allowed-base-urls.js";
import { MAX_TIMER_MS } from "./config-schema.js";
import { FleetStateError, ValidationError } from "./errors.js";
import { LOOKUPS_AT_ONCE, limitLookups } from "./webhook-lookups.js";

/** One delivery attempt's deadline, its host's lookup included (postWebhook). */
const DELIVERY_TIMEOUT_MS = 10_000;

export type WebhookSettings = {
  /** FLEET_WEBHOOK_SECRET: signs every delivery; without it batches with a webhook are refused. */
  secret: string | undefined;
  /**
   * FLEET_WEBHOOK_SECRET_PER_TENANT: each tenant's webhooks signed with its own secret, derived
   * from `secret` (webhook-secrets.ts); off by default: `secret` signs every tenant's.
   */
  perTenant?: boolean;
  /**
   * FLEET_WEBHOOK_SECRET_GRACE_MS: after a tenant rotates its own secret, how long its
   * deliveries are also signed with the one before; default 24 h, 0: not at all.
   */
  rotationGraceMs?: number;
  /** FLEET_WEBHOOK_ALLOWED_URLS, parsed; empty: any URL. */
  allowed: AllowedBaseUrl[];
  denyPrivate: boolean;
  /** FLEET_WEBHOOK_RETRY_MS: the first retry's delay (doubling up to an hour); default 1 s. */
  retryBaseMs: number;
  timeoutMs: number;
  /**
   * FLEET_WEBHOOK_LOCK_MS: how long a delivery's BullMQ lock lasts unrenewed (its sweeper
   * renews it every half of this while alive); default 10 s.
   */
  lockMs: number;
  /**
   * FLEET_WEBHOOK_STALL_CHECK_MS: how often a sweeper looks for deliveries whose lock lapsed
   * (their sweeper died) and sends them again; default 5 s.
   */
  stallCheckMs: number;
};

/**
 * An on/off variable: `1`/`true`/`yes`/`on` or `0`/`false`/`no`/`off`/unset. Anything else is
 * refused at start rather than read as off: FLEET_WEBHOOK_DENY_PRIVATE guards against
 * requests to private addresses, and `on` (as FLEET_FAIR_DISPATCH is spelled) quietly leaving
 * it off would be the worst reading of an operator's intent.
 */
function parseSwitch(value: string | undefined, name: string): boolean {
  const v = (value ?? "").trim().toLowerCase();
  if (["1", "true", "yes", "on"].includes(v)) return true;
  if (["", "0", "false", "no", "off"].includes(v)) return false;
  throw new ValidationError(name, `expected 1/true/yes/on or 0/false/no/off, not "${value}"`);
}

/**
 * A whole number of milliseconds from `env[name]`, at least `min` and at most MAX_TIMER_MS (a
 * longer timer fires after 1 ms: BullMQ's stalled-job check every millisecond); `def` when
 * unset or empty.
 */
function parseMs(
  env: Readonly<Record<string, string | undefined>>,
  name: string,
  def: number,
  min: number,
): number {
  const value = env[name];
  if (value === undefined || value.trim() === "") return def;
  const ms = Number(value);
  if (!Number.isInteger(ms) || ms < min || ms > MAX_TIMER_MS)
    throw new ValidationError(
      name,
      `expected a whole number of milliseconds, at least ${min} and at most ${MAX_TIMER_MS} (about 24.8 days, the longest a timer waits)`,
    );
  return ms;
}

/** Parsed once by config.ts (`FleetConfig.webhooks`): FLEET_WEBHOOK_* variables. */
export function webhookSettingsFromEnv(env: Readonly<Record<string, string | undefined>>): WebhookSettings {
  const base = Number(env.FLEET_WEBHOOK_RETRY_MS);
  if (
    env.FLEET_WEBHOOK_RETRY_MS !== undefined &&
    env.FLEET_WEBHOOK_RETRY_MS !== "" &&
    !(base > 0 && Number.isFinite(base))
  )
    throw new ValidationError("FLEET_WEBHOOK_RETRY_MS", "expected a number of milliseconds above 0");
  const perTenant = parseSwitch(env.FLEET_WEBHOOK_SECRET_PER_TENANT, "FLEET_WEBHOOK_SECRET_PER_TENANT");
  if (perTenant && !env.FLEET_WEBHOOK_SECRET)
    throw new ValidationError(
      "FLEET_WEBHOOK_SECRET_PER_TENANT",
      "is on, but FLEET_WEBHOOK_SECRET, which each tenant's secret is derived from, is not set",
    );
  return {
    secret: env.FLEET_WEBHOOK_SECRET || undefined,
    perTenant,
    rotationGraceMs: parseMs(env, "FLEET_WEBHOOK_SECRET_GRACE_MS", 86_400_000, 0),
    allowed: parseAllowedBaseUrls(env.FLEET_WEBHOOK_ALLOWED_URLS, "FLEET_WEBHOOK_ALLOWED_URLS"),
    denyPrivate: parseSwitch(env.FLEET_WEBHOOK_DENY_PRIVATE, "FLEET_WEBHOOK_DENY_PRIVATE"),
    retryBaseMs: Number.isFinite(base) && base > 0 ? base : 1_000,
    timeoutMs: DELIVERY_TIMEOUT_MS,
    lockMs: parseMs(env, "FLEET_WEBHOOK_LOCK_MS", 10_000, 1_000),
    stallCheckMs: parseMs(env, "FLEET_WEBHOOK_STALL_CHECK_MS", 5_000, 100),
  };
}

export { webhookBackoffMs } from "./webhook-backoff.js";

/**
 * Addresses a webhook must not reach when FLEET_WEBHOOK_DENY_PRIVATE is on. Node's BlockList
 * matches an IPv4-mapped IPv6 address (`::ffff:7f00:1`, `::ffff:127.0.0.1`) against the IPv4
 * rules, so no notation of a private IPv4 address slips through.
 */
const PRIVATE = (() => {
  const list = new BlockList();
  for (const [net, bits] of [
    ["0.0.0.0", 8], // "this network", unspecified
    ["10.0.0.0", 8],
    ["100.64.0.0", 10], // CGNAT
    ["127.0.0.0", 8],
    ["169.254.0.0", 16], // link-local, cloud metadata
    ["172.16.0.0", 12],
    ["192.0.0.0", 24], // IETF protocol assignments
    ["192.0.2.0", 24], // documentation (TEST-NET-1), like IPv6's below: never on the Internet
    ["192.168.0.0", 16],
    ["198.18.0.0", 15], // benchmarking
    ["198.51.100.0", 24], // documentation (TEST-NET-2)
    ["203.0.113.0", 24], // documentation (TEST-NET-3)
    ["224.0.0.0", 4], // multicast
    ["240.0.0.0", 4], // reserved, broadcast
  ] as const)
    list.addSubnet(net, bits, "ipv4");
  for (const [net, bits] of [
    ["::", 96], // unspecified, loopback, IPv4-compatible (deprecated)
    ["64:ff9b::", 96], // NAT64: reaches whatever IPv4 address it embeds
    ["64:ff9b:1::", 48], // local-use NAT64
    // IPv4-translated (SIIT), ::ffff:0:0/96, reaches the IPv4 address it embeds; written out
    // in full: BlockList takes "::ffff:0:0" for an IPv4-mapped address and matches nothing.
    ["0:0:0:0:ffff:0:0:0", 96],
    ["100::", 64], // discard-only
    ["2001::", 32], // Teredo: a tunnel to the IPv4 address it embeds
    ["2001:db8::", 32], // documentation
    ["3fff::", 20], // documentation (RFC 9637)
    ["2002::", 16], // 6to4: a relay to the IPv4 address it embeds
    ["fc00::", 7], // unique local
    ["fe80::", 10], // link-local
    ["fec0::", 10], // site-local (deprecated)
    ["ff00::", 8], // multicast
  ] as const)
    list.addSubnet(net, bits, "ipv6");
  return list;
})();

/** Whether an IP address is one a webhook must not reach with FLEET_WEBHOOK_DENY_PRIVATE on (PRIVATE). */
export function isPrivateAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 0) return false;
  return PRIVATE.check(address, family === 4 ? "ipv4" : "ipv6");
}

/** `localhost`, with its root dot or not, and every name under it (RFC 6761 §6.3: loopback). */
function isLoopbackName(host: string): boolean {
  return /(^|\.)localhost\.?$/i.test(host);
}

/**
 * Checks a webhook URL at submit; throws a ValidationError naming `field`. What the operator's
 * settings refuse (no FLEET_WEBHOOK_SECRET, a URL outside FLEET_WEBHOOK_ALLOWED_URLS, a private
 * address under FLEET_WEBHOOK_DENY_PRIVATE) is a FleetStateError: an Idempotency-Key does not
 * keep that answer, so the same request acts once the operator changes the setting.
 */
export function checkWebhookUrl(value: string, settings: WebhookSettings, field: string): string {
  if (!settings.secret)
    throw new FleetStateError(
      field,
      "this fleet has no FLEET_WEBHOOK_SECRET configured, so it sends no webhooks",
    );
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new ValidationError(field, "is not a valid URL");
  }
  if (url.protocol !== "http:" && url.protocol !== "https:")
    throw new ValidationError(field, "must be an http: or https: URL");
  if (url.username || url.password) throw new ValidationError(field, "must not carry credentials");
  if (value.length > 2_048) throw new ValidationError(field, "is longer than 2,048 characters");
  if (settings.allowed.length > 0 && !isAllowedBaseUrl(value, settings.allowed))
    throw new FleetStateError(field, "is not under an entry of FLEET_WEBHOOK_ALLOWED_URLS");
  const host = url.hostname.replace(/^\[|\]$/g, "");
  if (settings.denyPrivate && (isLoopbackName(host) || (isIP(host) !== 0 && isPrivateAddress(host))))
    throw new FleetStateError(field, "points at a private address, which this fleet refuses");
  return value;
}

/** A DNS lookup that refuses private addresses (FLEET_WEBHOOK_DENY_PRIVATE). */
const publicOnlyLookup: LookupFunction = (hostname, options, callback) => {
  dnsLookup(hostname, { ...options, all: true }, (error, addresses) => {
    if (error) return callback(error, "", 0);
    const list = addresses as LookupAddress[];
    const refused = list.find((a) => isPrivateAddress(a.address));
    if (refused || list.length === 0)
      return callback(new Error(`${hostname} resolves to a private address`), "", 0);
    if ((options as { all?: boolean }).all)
      return (callback as (e: null, a: LookupAddress[]) => void)(null, list);
    return callback(null, list[0]!.address, list[0]!.family);
  });
};

/** Every delivery's lookups, a few at a time (webhook-lookups.ts). */
const plainLookups = limitLookups(dnsLookup as LookupFunction, LOOKUPS_AT_ONCE, DELIVERY_TIMEOUT_MS);
const publicOnlyLookups = limitLookups(publicOnlyLookup, LOOKUPS_AT_ONCE, DELIVERY_TIMEOUT_MS);

/** POSTs one signed delivery; resolves with the status code, rejects on a network error. */
export function postWebhook(
  url: string,
  body: string,
  headers: Record<string, string>,
  settings: WebhookSettings,
): Promise<number> {
  const target = new URL(url);
  const host = target.hostname.replace(/^\[|\]$/g, "");
  // Checked again here, as the workers check a stored model's route before each run: a URL
  // stored before the operator set (or narrowed) FLEET_WEBHOOK_ALLOWED_URLS, or by a release
  // whose matching let it through, is not sent to.
  if (settings.allowed.length > 0 && !isAllowedBaseUrl(url, settings.allowed))
    return Promise.reject(new Error("the URL is not under an entry of FLEET_WEBHOOK_ALLOWED_URLS"));
  if (settings.denyPrivate && isIP(host) !== 0 && isPrivateAddress(host))
    return Promise.reject(new Error(`${host} is a private address`));
  const send = target.protocol === "https:" ? httpsRequest : httpRequest;
  return new Promise((resolve, reject) => {
    // The whole attempt has one deadline: `timeout` alone is the socket's idle time, which a
    // receiver that trickles a byte every few seconds never reaches — and delivery slots are
    // shared by every tenant's batches.
    const deadline = setTimeout(
      () => req.destroy(new Error(`no answer within ${settings.timeoutMs} ms`)),
      settings.timeoutMs,
    );
    const settle =
      <T>(done: (value: T) => void) =>
      (value: T) => {
        clearTimeout(deadline);
        done(value);
      };
    const req = send(
      target,
      {
        method: "POST",
        headers: {
          "content-type": "application/json",
          "content-length": String(Buffer.byteLength(body)),
          "user-agent": "agent-fleet-webhook",
          ...headers,
        },
        timeout: settings.timeoutMs,
        lookup: settings.denyPrivate ? publicOnlyLookups : plainLookups,
      },
      (res) => {
        // The status is the answer: the body is not read (nor waited for).
        settle(resolve)(res.statusCode ?? 0);
        res.destroy();
      },
    );
    req.on("timeout", () => req.destroy(new Error(`no answer within ${settings.timeoutMs} ms`)));
    req.on("error", settle(reject));
    req.end(body);
  });
}
