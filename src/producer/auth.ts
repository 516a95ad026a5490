/**
 * Who is calling (contracts §10): `Authorization: Bearer KEY` → the key's tenant. A key is
 * looked up by its hash; valid keys are remembered for `cacheMs` (5 s), so a revoked key
 * stops working within that time. With no key stored at all the API is in dev mode —
 * allowed only on a loopback address — and serves requests without a key as tenant
 * `default`; whether a key exists is looked at again every `cacheMs`, so creating the first
 * key turns authentication on without a restart. Dev mode serves only requests addressed to a
 * loopback name and not sent by a web page of another origin (cross-site.ts).
 */
import { isIP } from "node:net";
import { type ApiKeys, DEFAULT_TENANT, hashKey, MAX_KEY_LENGTH } from "../shared/store/api-keys.js";
import { crossSiteReason, type RequestSite } from "./cross-site.js";

/**
 * A request without a valid key: the API answers 401 (with a `challenge` for
 * WWW-Authenticate), or 403 when the key is valid but may not open an admin route.
 */
export class UnauthorizedError extends Error {
  override name = "UnauthorizedError";
  constructor(
    message: string,
    readonly status: 401 | 403 = 401,
    readonly challenge: "Bearer" | "Basic" = "Bearer",
  ) {
    super(message);
  }
}

/** Who a valid key belongs to. */
export type Caller = { tenant: string; admin: boolean };
/** A stored key as a look-up finds it. */
type Found = { id: string; tenant: string; admin: boolean };

/** How long a valid key is remembered, and how often dev mode looks for a first key. */
export const AUTH_CACHE_MS = 5_000;
/** Valid keys remembered at most (the oldest are forgotten first). */
const MAX_CACHED = 10_000;
/**
 * How long a key found valid is recognised (`recognises`) after it was last used: a request
 * with it is looked up even from an address that failed too often (auth-failures.ts).
 */
export const RECOGNISED_MS = 24 * 3600 * 1000;

/** The key of a `Bearer KEY` header, or of Basic credentials (their password); else undefined. */
function keyOf(header: string | undefined): string | undefined {
  const bearer = /^Bearer +(\S+) *$/i.exec(header ?? "")?.[1];
  if (bearer !== undefined) return bearer;
  const basic = /^Basic +([A-Za-z0-9+/=]+) *$/i.exec(header ?? "")?.[1];
  return basic === undefined ? undefined : passwordOf(basic);
}

/** Sets `key` last in `map` (the newest), forgetting the oldest entry past `max`. */
function remember<T>(map: Map<string, T>, key: string, value: T, max: number): void {
  map.delete(key);
  if (map.size >= max) {
    const oldest = map.keys().next().value;
    if (oldest !== undefined) map.delete(oldest);
  }
  map.set(key, value);
}

/** Whether `host` is a loopback address (or `localhost`): only then may dev mode serve. */
export function isLoopbackHost(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, "").toLowerCase();
  if (h === "localhost" || h === "::1") return true;
  if (isIP(h) === 4) return h.startsWith("127.");
  return /^::ffff:127\./.test(h);
}

/** The host name of a `Host` header (`example.com:3000` → `example.com`, `[::1]:3000` → `::1`). */
function hostnameOf(host: string): string {
  try {
    return new URL(`http://${host}`).hostname;
  } catch {
    return "";
  }
}

export class ApiAuth {
  private readonly cache = new Map<string, Caller & { until: number }>();
  /** Hashes of keys found unknown, until when they are answered 401 without a look-up. */
  private readonly unknown = new Map<string, number>();
  /** Hashes of keys found valid, and when that was last so (see RECOGNISED_MS). */
  private readonly recognised = new Map<string, number>();
  /** Look-ups in flight by hash: requests that ask at once for one key share one. */
  private readonly lookups = new Map<string, Promise<Found | undefined>>();
  private keysExist = false;
  private checkedAt = Number.NEGATIVE_INFINITY;
  private checking: Promise<boolean> | undefined;
  private readonly cacheMs: number;
  private readonly now: () => number;

  constructor(
    private readonly deps: {
      keys: Pick<ApiKeys, "anyExists" | "tenantOf">;
      /** Whether the API listens on a loopback address. */
      loopback: boolean;
      cacheMs?: number;
      now?: () => number;
    },
  ) {
    this.cacheMs = deps.cacheMs ?? AUTH_CACHE_MS;
    this.now = deps.now ?? Date.now;
  }

  /** Whether requests without a key are served (no key exists, and the API is on loopback). */
  async devMode(): Promise<boolean> {
    return this.deps.loopback && !(await this.anyKey());
  }

  /**
   * Dev mode serves a request only when it was addressed to a loopback name: a page on any
   * site can make a browser send requests to 127.0.0.1 under the page's own host name (DNS
   * rebinding), and its `Host` header then names that site. Nor when a browser says a page of
   * another origin sent it (`Origin`, `Sec-Fetch-Site`): any page the developer opens could
   * cancel, resume or delete with a body-less no-cors POST, which needs no CORS preflight.
   * Throws UnauthorizedError (403).
   */
  private async devModeFor(from: RequestSite = {}): Promise<boolean> {
    if (!(await this.devMode())) return false;
    const { host } = from;
    if (host === undefined || !isLoopbackHost(hostnameOf(host)))
      throw new UnauthorizedError(
        `with no API key stored, this API answers only requests addressed to a loopback name (localhost, 127.0.0.1, [::1]); this one was addressed to ${JSON.stringify(host ?? "")}: create a key (\`fleet keys create --tenant NAME\`) to serve it`,
        403,
      );
    const crossSite = crossSiteReason(from);
    if (crossSite !== undefined)
      throw new UnauthorizedError(
        `with no API key stored, this API answers no web page of another site or origin, and ${crossSite}: only its console (/console), curl, the CLI and clients that send no Origin are served; create a key (\`fleet keys create --tenant NAME\`) and send it as \`Authorization: Bearer KEY\` to call it from elsewhere`,
        403,
      );
    return true;
  }

  /** Whether a key exists; looked up at most every `cacheMs` until one does (then for good). */
  private async anyKey(): Promise<boolean> {
    if (this.keysExist || this.now() - this.checkedAt < this.cacheMs) return this.keysExist;
    this.checking ??= this.deps.keys
      .anyExists()
      .then((exists) => {
        this.keysExist = exists;
        this.checkedAt = this.now();
        return exists;
      })
      .finally(() => {
        this.checking = undefined;
      });
    return this.checking;
  }

  /**
   * The tenant of a request with this `Authorization` header; throws UnauthorizedError. `from`:
   * the request's headers, which dev mode reads (`Host`, `Origin`, `Sec-Fetch-Site`).
   */
  async authenticate(header: string | undefined, from?: RequestSite): Promise<string> {
    if (header === undefined || header === "") {
      if (await this.devModeFor(from)) return DEFAULT_TENANT;
      throw new UnauthorizedError(
        "this API requires an API key: send `Authorization: Bearer KEY` (an operator creates one with `fleet keys create --tenant NAME`)",
      );
    }
    const match = /^Bearer +(\S+) *$/i.exec(header);
    return (await this.caller(match?.[1], "Bearer")).tenant;
  }

  /**
   * Admits a request to an admin route (Bull Board): an admin key, as `Bearer KEY` or as the
   * password of HTTP Basic (what a browser prompts for); anyone in dev mode. Throws
   * UnauthorizedError: 401 asking for Basic, or 403 for a valid key that is not an admin's.
   */
  async authenticateAdmin(header: string | undefined, from?: RequestSite): Promise<void> {
    if ((header === undefined || header === "") && (await this.devModeFor(from))) return;
    const key = keyOf(header);
    if (key === undefined) {
      throw new UnauthorizedError(
        "admin routes need an admin API key (`fleet keys create --tenant NAME --admin`), as `Bearer KEY` or as the password of Basic auth",
        401,
        "Basic",
      );
    }
    const caller = await this.caller(key, "Basic");
    if (!caller.admin) {
      throw new UnauthorizedError(
        "this API key may not open admin routes; create one with `fleet keys create --tenant NAME --admin`",
        403,
      );
    }
  }

  /**
   * Whether this `Authorization` header carries a key that was valid within RECOGNISED_MS (no
   * look-up): a tenant's key, not a guess, even when its address failed too often.
   */
  recognises(header: string | undefined): boolean {
    const key = keyOf(header);
    if (key === undefined || key.length > MAX_KEY_LENGTH) return false;
    const seen = this.recognised.get(hashKey(key));
    return seen !== undefined && this.now() - seen < RECOGNISED_MS;
  }

  /**
   * The caller a key belongs to (cached for `cacheMs`); throws UnauthorizedError. A key found
   * unknown is answered so without a look-up for `cacheMs` too (a client retrying a revoked
   * key, or a guesser repeating one): a key created meanwhile works within that time.
   */
  private async caller(key: string | undefined, challenge: "Bearer" | "Basic"): Promise<Caller> {
    if (key === undefined || key.length > MAX_KEY_LENGTH) {
      throw new UnauthorizedError("the Authorization header must be `Bearer KEY`", 401, challenge);
    }
    const hash = hashKey(key);
    const now = this.now();
    const cached = this.cache.get(hash);
    if (cached && cached.until > now) return cached;
    this.cache.delete(hash);
    const unknownUntil = this.unknown.get(hash);
    const found = unknownUntil !== undefined && unknownUntil > now ? undefined : await this.lookUp(hash);
    if (!found) {
      this.recognised.delete(hash);
      if (unknownUntil === undefined || unknownUntil <= now)
        remember(this.unknown, hash, now + this.cacheMs, MAX_CACHED);
      throw new UnauthorizedError("the API key is not valid (unknown or revoked)", 401, challenge);
    }
    this.unknown.delete(hash);
    remember(this.recognised, hash, now, MAX_CACHED);
    this.keysExist = true;
    if (this.cache.size >= MAX_CACHED) this.forgetOldest(now);
    const entry = { tenant: found.tenant, admin: found.admin, until: now + this.cacheMs };
    this.cache.set(hash, entry);
    return entry;
  }

  /** The key of `hash` in Postgres, asked once for all the requests waiting on it. */
  private lookUp(hash: string): Promise<Found | undefined> {
    let lookup = this.lookups.get(hash);
    if (lookup === undefined) {
      lookup = this.deps.keys.tenantOf(hash).finally(() => this.lookups.delete(hash));
      this.lookups.set(hash, lookup);
    }
    return lookup;
  }

  private forgetOldest(now: number): void {
    for (const [hash, entry] of this.cache) if (entry.until <= now) this.cache.delete(hash);
    if (this.cache.size < MAX_CACHED) return;
    const oldest = this.cache.keys().next().value;
    if (oldest !== undefined) this.cache.delete(oldest);
  }
}

/** The password of HTTP Basic credentials (`user:password`, base64); the user name is ignored. */
function passwordOf(credentials: string): string | undefined {
  const decoded = Buffer.from(credentials, "base64").toString("utf8");
  const colon = decoded.indexOf(":");
  return colon < 0 || colon === decoded.length - 1 ? undefined : decoded.slice(colon + 1);
}

/**
 * Stores FLEET_BOOTSTRAP_KEY when no key exists (ApiKeys.bootstrap), and says what the API logs
 * at start when the key it is given is not a valid key here: another key existed, so it was not
 * stored (an operator who rotates the first key by changing the variable), or it was revoked.
 * Such a key is refused (401) on every request; before, nothing said why. Undefined: no key set,
 * or it works.
 */
export async function storeBootstrapKey(
  keys: Pick<ApiKeys, "bootstrap" | "tenantOf">,
  key: string | undefined,
): Promise<string | undefined> {
  // One too long for a request to carry is refused whatever is stored: a release before stored
  // it, and said nothing here.
  if (key === undefined || (await keys.bootstrap(key))) return;
  if (key.length <= MAX_KEY_LENGTH && (await keys.tenantOf(hashKey(key)))) return;
  return (
    "FLEET_BOOTSTRAP_KEY is set but is not a valid key of this fleet (revoked, or not stored: it is " +
    "stored only while no key exists): requests sending it are refused (401); use a key made by " +
    "`fleet keys create --tenant NAME`, and unset FLEET_BOOTSTRAP_KEY"
  );
}
