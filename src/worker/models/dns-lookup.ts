/**
 * The DNS lookup of model-provider connections (transport.ts `providerFetch`), off libuv's
 * thread pool and bounded in time.
 *
 * Node's default lookup, `dns.lookup`, is getaddrinfo on one of the pool's 4 threads (shared
 * by every file operation, zlib and crypto of the process), held until the system resolver
 * gives up: a model host whose DNS server never answers held all 4 with 4 calls, and every
 * file tool, transcript write and read of the worker waited behind them. Here the name is asked
 * of the DNS servers (`dns.getServers()`, /etc/resolv.conf's unless `dns.setServers` changed
 * them) through c-ares (`dns.Resolver`), which waits on a socket, not a thread, and is given up
 * after `timeoutMs`.
 *
 * The hosts file comes first, as in the system's lookup (hosts-file.ts): a host pinned there
 * (Kubernetes' `hostAliases`) is connected to where every other program connects. Only when
 * DNS answered that it has no such name (ENOTFOUND, ENODATA) is the system's lookup asked: it
 * applies resolv.conf's `search` domains (a short name in Kubernetes), which c-ares' queries do
 * not; a server that answered is there to answer it too.
 * `localhost` (and `*.localhost`) is the loopback address, asked of no one (RFC 6761).
 */
import dns from "node:dns";
import { isIP, type LookupFunction } from "node:net";
import { type Address, hostsFileAddresses } from "./hosts-file.js";

/** How long one lookup may take before it fails (as getaddrinfo's own per-try timeout, 5 s). */
export const DNS_LOOKUP_TIMEOUT_MS = 5_000;

export type { Address };

/** One family's answer: its addresses, or the error code c-ares gave. */
export type FamilyAnswer = { addresses: string[] } | { code: string };

/** What the answers of a lookup's queries mean (pure). */
export type LookupDecision =
  | { outcome: "addresses"; addresses: Address[] }
  | { outcome: "ask_system" }
  | { outcome: "failed"; code: string };

/** Codes by which a DNS server said the name has no address (it answered). */
const ANSWERED_NO = new Set(["ENOTFOUND", "ENODATA"]);

/** Decides on the answers for IPv4 and IPv6 (either absent when that family was not asked). */
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
  if (codes.every((code) => ANSWERED_NO.has(code))) return { outcome: "ask_system" };
  return { outcome: "failed", code: codes.find((code) => !ANSWERED_NO.has(code)) ?? "ENOTFOUND" };
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
export function boundedLookup(timeoutMs = DNS_LOOKUP_TIMEOUT_MS, hostsPath = "/etc/hosts"): LookupFunction {
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
    void resolveBounded(hostname, family, timeoutMs).then(
      (found) => answer(null, found),
      (error: NodeJS.ErrnoException) => answer(error, []),
    );
  };
}

async function resolveBounded(host: string, family: 0 | 4 | 6, timeoutMs: number): Promise<Address[]> {
  // One resolver per lookup, so that its deadline cancels its own queries only.
  const resolver = new dns.Resolver({ timeout: timeoutMs, tries: 1 });
  resolver.setServers(dns.getServers());
  const deadline = setTimeout(() => resolver.cancel(), timeoutMs);
  const ask = (method: "resolve4" | "resolve6") =>
    new Promise<FamilyAnswer>((resolve) =>
      resolver[method](host, (error, addresses) =>
        resolve(error ? { code: error.code ?? "EFAIL" } : { addresses }),
      ),
    );
  let decision: LookupDecision;
  try {
    const [v4, v6] = await Promise.all([
      family === 6 ? null : ask("resolve4"),
      family === 4 ? null : ask("resolve6"),
    ]);
    decision = decideLookup(v4, v6);
  } finally {
    clearTimeout(deadline);
  }
  switch (decision.outcome) {
    case "addresses":
      return decision.addresses;
    case "ask_system":
      return (await dns.promises.lookup(host, { all: true, family })) as Address[];
    case "failed": {
      const said =
        decision.code === "ECANCELLED" || decision.code === "ETIMEOUT"
          ? `got no answer within ${timeoutMs} ms`
          : `failed (${decision.code})`;
      return Promise.reject(
        Object.assign(new Error(`DNS lookup of ${host} ${said}`), {
          code: decision.code === "ECANCELLED" ? "ETIMEOUT" : decision.code,
          syscall: "queryA",
          hostname: host,
        }),
      );
    }
    default: {
      const unhandled: never = decision;
      throw new Error(`unhandled lookup decision ${JSON.stringify(unhandled)}`);
    }
  }
}
