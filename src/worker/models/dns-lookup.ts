/**
 * The DNS lookup of model-provider connections (transport.ts `providerFetch`), off libuv's
 * thread pool and bounded in time.
 *
 * Node's default lookup, `dns.lookup`, is getaddrinfo on one of the pool's 4 threads (shared
 * by every file operation, zlib and crypto of the process), held until the system resolver
 * gives up: a model host whose DNS server never answers held all 4 with 4 calls, and every
 * file tool, transcript write and read of the worker waited behind them. Here the name is asked
 * of the DNS servers (`dns.getServers()`, /etc/resolv.conf's unless `dns.setServers` changed
 * them) through c-ares (`dns.Resolver`), which waits on a socket, not a thread, and the whole
 * lookup is given up after `timeoutMs`.
 *
 * The hosts file comes first, as in the system's lookup (hosts-file.ts): a host pinned there
 * (Kubernetes' `hostAliases`) is connected to where every other program connects. Then the
 * name is asked as the system's resolver asks it: under resolv.conf's `search` domains, in
 * glibc's order (resolv-conf.ts; a short name in Kubernetes), one name after another while
 * DNS answers that there is no such name (or SERVFAIL, as glibc goes on), until one has an
 * address. getaddrinfo is never called: before, a name DNS did not know was handed to it for
 * the search domains, and a server that never answered for those held a pool thread.
 * `localhost` (and `*.localhost`) is the loopback address, asked of no one (RFC 6761).
 */
import dns from "node:dns";
import { isIP, type LookupFunction } from "node:net";
import { type Address, hostsFileAddresses } from "./hosts-file.js";
import { searchConfig, searchNames } from "./resolv-conf.js";

/** How long one lookup may take before it fails (as getaddrinfo's own per-try timeout, 5 s). */
export const DNS_LOOKUP_TIMEOUT_MS = 5_000;

export type { Address };

/** One family's answer: its addresses, or the error code c-ares gave. */
export type FamilyAnswer = { addresses: string[] } | { code: string };

/** What the answers of one name's queries mean (pure). */
export type LookupDecision =
  | { outcome: "addresses"; addresses: Address[] }
  | { outcome: "no_such_name" }
  | { outcome: "server_failed" }
  | { outcome: "failed"; code: string };

/** Codes by which a DNS server said the name has no address (it answered). */
const ANSWERED_NO = new Set(["ENOTFOUND", "ENODATA"]);

/**
 * Decides on one name's answers for IPv4 and IPv6 (either absent when that family was not
 * asked). The search goes on to the next name after `no_such_name` and, as glibc's does, after
 * `server_failed` (SERVFAIL); not after a failure of any other kind (no answer in time).
 */
export function decideLookup(v4: FamilyAnswer | null, v6: FamilyAnswer | null): LookupDecision {
  const addresses: Address[] = [];
  for (const [answer, family] of [
    [v4, 4],
    [v6, 6],
  ] as const)
    if (answer && "addresses" in answer)
      for (const address of answer.addresses) addresses.push({ address, family });
  if (addresses.length > 0) return { outcome: "addresses", addresses };
  const codes = [v4, v6].flatMap((answer) => (answer && "code" in answer ? [answer.code] : []));
  const stopping = codes.find((code) => !ANSWERED_NO.has(code) && code !== "ESERVFAIL");
  if (stopping !== undefined) return { outcome: "failed", code: stopping };
  if (codes.includes("ESERVFAIL")) return { outcome: "server_failed" };
  return { outcome: "no_such_name" };
}

/** `host`'s fixed addresses: an IP address itself, the loopback for localhost; else null. */
export function fixedAddresses(host: string): Address[] | null {
  const family = isIP(host);
  if (family === 4 || family === 6) return [{ address: host, family }];
  const name = host.toLowerCase().replace(/\.$/, "");
  if (name === "localhost" || name.endsWith(".localhost"))
    return [
      { address: "127.0.0.1", family: 4 },
      { address: "::1", family: 6 },
    ];
  return null;
}

/** A `lookup` for `net.connect` / undici's `connect` option (see the file comment). */
export function boundedLookup(
  timeoutMs = DNS_LOOKUP_TIMEOUT_MS,
  hostsPath = "/etc/hosts",
  resolvConfPath = "/etc/resolv.conf",
): LookupFunction {
  return (hostname, options, callback) => {
    const family = options.family === 4 || options.family === 6 ? options.family : 0;
    const answer = (error: NodeJS.ErrnoException | null, found: Address[]) => {
      if (error) callback(error, options.all ? [] : "", 0);
      else if (options.all) callback(null, found);
      else callback(null, found[0]!.address, found[0]!.family);
    };
    const fixed = (fixedAddresses(hostname) ?? hostsFileAddresses(hostname, hostsPath))?.filter(
      (a) => family === 0 || a.family === family,
    );
    if (fixed && fixed.length > 0) return answer(null, fixed);
    const names = searchNames(hostname, searchConfig(resolvConfPath));
    void resolveBounded(hostname, names, family, timeoutMs).then(
      (found) => answer(null, found),
      (error: NodeJS.ErrnoException) => answer(error, []),
    );
  };
}

/** The lookup's error: `code` as c-ares gave it (a cancel by the deadline: ETIMEOUT). */
function lookupError(host: string, code: string, timeoutMs: number, asked: string[]): NodeJS.ErrnoException {
  const said =
    code === "ECANCELLED" || code === "ETIMEOUT"
      ? `got no answer within ${timeoutMs} ms`
      : code === "ENOTFOUND"
        ? `found no such name (asked ${asked.join(", ")})`
        : `failed (${code})`;
  return Object.assign(new Error(`DNS lookup of ${host} ${said}`), {
    code: code === "ECANCELLED" ? "ETIMEOUT" : code,
    syscall: "queryA",
    hostname: host,
  });
}

/** `host`'s addresses: `names` asked in turn (see the file comment), all within `timeoutMs`. */
async function resolveBounded(
  host: string,
  names: string[],
  family: 0 | 4 | 6,
  timeoutMs: number,
): Promise<Address[]> {
  // One resolver per lookup, so that its deadline cancels its own queries only.
  const resolver = new dns.Resolver({ timeout: timeoutMs, tries: 1 });
  resolver.setServers(dns.getServers());
  let expired = false;
  const deadline = setTimeout(() => {
    expired = true;
    resolver.cancel();
  }, timeoutMs);
  const ask = (name: string, method: "resolve4" | "resolve6") =>
    new Promise<FamilyAnswer>((resolve) =>
      resolver[method](name, (error, addresses) =>
        resolve(error ? { code: error.code ?? "EFAIL" } : { addresses }),
      ),
    );
  const asked: string[] = [];
  let serverFailed = false;
  try {
    for (const name of names) {
      if (expired) throw lookupError(host, "ETIMEOUT", timeoutMs, asked);
      asked.push(name);
      const [v4, v6] = await Promise.all([
        family === 6 ? null : ask(name, "resolve4"),
        family === 4 ? null : ask(name, "resolve6"),
      ]);
      const decision = decideLookup(v4, v6);
      switch (decision.outcome) {
        case "addresses":
          return decision.addresses;
        case "no_such_name":
          break;
        case "server_failed":
          serverFailed = true;
          break;
        case "failed":
          throw lookupError(host, decision.code, timeoutMs, asked);
        default: {
          const unhandled: never = decision;
          throw new Error(`unhandled lookup decision ${JSON.stringify(unhandled)}`);
        }
      }
    }
  } finally {
    clearTimeout(deadline);
  }
  throw lookupError(host, serverFailed ? "ESERVFAIL" : "ENOTFOUND", timeoutMs, asked);
}
