/**
 * resolv.conf's search list for model-provider lookups (dns-lookup.ts): the names a host name
 * is asked as, in the order glibc's resolver asks them (res_search), so that a short name
 * (a Kubernetes Service's, known only under the pod's `search` domains) is found through
 * c-ares as the system's lookup would find it, and getaddrinfo is never needed.
 *
 * Read as glibc reads it: `domain` and `search` each set the search list, the last such line
 * winning; with neither, the machine's host name's domain (after its first dot). `options
 * ndots:n` (at most 15; default 1) and `no-tld-query`. The environment overrides the file:
 * `LOCALDOMAIN` (the search list, blank-separated) and `RES_OPTIONS` (options). The file is
 * read again only when it changes.
 */
import { readFileSync, statSync } from "node:fs";
import { hostname } from "node:os";

/** What decides the names a host name is asked as. */
export type SearchConfig = {
  /** The search domains, in order, without their root dot (the root itself: ""). */
  search: string[];
  /** A name with at least this many dots is asked as it is first. */
  ndots: number;
  /** `no-tld-query`: a name without a dot is never asked as it is. */
  noTldQuery: boolean;
};

/** glibc's RES_MAXNDOTS. */
const MAX_NDOTS = 15;

/** Applies one blank-separated `options` list to `config`; options other than these are the resolver's own. */
function applyOptions(config: SearchConfig, options: string): void {
  for (const option of options.split(/\s+/)) {
    const ndots = /^ndots:(\d+)$/.exec(option);
    if (ndots) config.ndots = Math.min(Number(ndots[1]), MAX_NDOTS);
    else if (option === "no-tld-query") config.noTldQuery = true;
  }
}

function domains(words: string): string[] {
  return words
    .split(/\s+/)
    .filter((word) => word !== "")
    .map((word) => word.replace(/\.$/, ""));
}

/** The search configuration of a resolv.conf's `text`, `env` and the machine's `host` name (pure). */
export function parseResolvConf(
  text: string,
  env: Readonly<Record<string, string | undefined>>,
  host: string,
): SearchConfig {
  const config: SearchConfig = { search: [], ndots: 1, noTldQuery: false };
  let listed = false;
  for (const line of text.split("\n")) {
    const match = /^(domain|search|options)[ \t]+(.*)$/.exec(line.replace(/\r$/, ""));
    if (!match) continue;
    const [, keyword, rest] = match as unknown as [string, "domain" | "search" | "options", string];
    switch (keyword) {
      case "domain":
        config.search = domains(rest).slice(0, 1);
        listed = true;
        break;
      case "search":
        config.search = domains(rest);
        listed = true;
        break;
      case "options":
        applyOptions(config, rest);
        break;
      default: {
        const unhandled: never = keyword;
        throw new Error(`unhandled resolv.conf keyword ${String(unhandled)}`);
      }
    }
  }
  const local = env.LOCALDOMAIN;
  if (local !== undefined) config.search = domains(local);
  else if (!listed && host.includes(".")) config.search = domains(host.slice(host.indexOf(".") + 1));
  if (env.RES_OPTIONS !== undefined) applyOptions(config, env.RES_OPTIONS);
  return config;
}

/**
 * The names `host` is asked as, in order (pure): a name with its root dot only as it is; one
 * with `ndots` dots or more as it is first, then under each search domain; one with fewer
 * under each search domain first, then as it is (not with `no-tld-query` if it has no dot).
 */
export function searchNames(host: string, config: SearchConfig): string[] {
  if (host.endsWith(".")) return [host];
  const dots = host.split(".").length - 1;
  const names: string[] = [];
  if (dots >= config.ndots) names.push(host);
  for (const domain of config.search) names.push(domain === "" ? host : `${host}.${domain}`);
  if (dots > 0 || !config.noTldQuery) names.push(host);
  const seen = new Set<string>();
  return names.filter((name) => {
    const key = name.toLowerCase();
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}

const read = new Map<string, { mtimeMs: number; size: number; text: string }>();

/** The search configuration of the resolv.conf at `path` (none there: an empty file's). */
export function searchConfig(
  path = "/etc/resolv.conf",
  env: Readonly<Record<string, string | undefined>> = process.env,
  host = hostname(),
): SearchConfig {
  let text = "";
  try {
    const info = statSync(path);
    let cached = read.get(path);
    if (!cached || cached.mtimeMs !== info.mtimeMs || cached.size !== info.size) {
      cached = { mtimeMs: info.mtimeMs, size: info.size, text: readFileSync(path, "utf8") };
      read.set(path, cached);
    }
    text = cached.text;
  } catch {
    // No file (or unreadable): glibc's defaults.
  }
  return parseResolvConf(text, env, host);
}
