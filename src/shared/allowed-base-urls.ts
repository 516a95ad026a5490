/**
 * FLEET_ALLOWED_BASE_URLS (contracts.md §11): the URL prefixes a MODEL may name as a raw
 * `baseUrl` (model-endpoints.ts), and webhooks' allowed destinations (webhooks.ts).
 *
 * Prefixes are compared on parsed URLs (the WHATWG parser fetch uses), never as strings:
 * same scheme, same host, the same port when the entry names one (any port when it does not),
 * and a path under the entry's path at a segment boundary. So `http://127.0.0.1` admits
 * `http://127.0.0.1:8080/v1` but not `http://127.0.0.1.evil.com` or `http://127.0.0.1@evil.com`,
 * and `http://h/v1` admits `http://h/v1/x` but not `http://h/v10`. A path none of whose
 * segments may step out of its prefix on the server: one that reads as `/`, `\`, `.` or `..`
 * once percent-decoded (`..%2f`, `%2e%2e%2f`, `..%5c`, twice encoded too) or as `..;` (a
 * matrix parameter, which Tomcat drops) is refused, since servers and proxies that decode
 * before resolving dot segments (nginx) read `/v1/..%2fadmin` as `/admin`.
 */
import { ValidationError } from "./errors.js";

/** One entry of FLEET_ALLOWED_BASE_URLS, parsed. */
export type AllowedBaseUrl = {
  /** As the operator wrote it. */
  entry: string;
  protocol: "http:" | "https:";
  hostname: string;
  /** Null: any port (the entry names none). */
  port: string | null;
  /** Starts with `/`. */
  path: string;
};

function defaultPort(protocol: string): string {
  return protocol === "https:" ? "443" : "80";
}

/**
 * Whether `raw` writes a port after its host (the parser drops a default one, e.g. `:80`).
 * Read as the parser reads an http(s) URL: tabs and line breaks dropped, and any number of
 * `/` or `\` after the scheme (`http:/h:8080` and `http:h:8080` are `http://h:8080`).
 */
function hasExplicitPort(raw: string): boolean {
  const text = raw.replace(/[\t\n\r]/g, "").trim();
  const authority = /^[a-z][a-z0-9+.-]*:[/\\]*([^/\\?#]*)/i.exec(text)?.[1] ?? "";
  // `[::1]:8080` → `:8080`; `[::1]` ends with `]`; `host:8080` → `:8080`.
  return /:\d+$/.test(authority);
}

/** Parses one FLEET_ALLOWED_BASE_URLS entry; throws an Error saying what is wrong with it. */
export function parseAllowedBaseUrl(raw: string): AllowedBaseUrl {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new Error("is not a URL");
  }
  if (url.protocol !== "http:" && url.protocol !== "https:")
    throw new Error("must be an http:// or https:// URL");
  if (url.username || url.password) throw new Error("must not carry a user name or password");
  if (url.search || url.hash || raw.includes("?") || raw.includes("#"))
    throw new Error("must not have a query or a fragment");
  if (!url.hostname) throw new Error("must name a host");
  return {
    entry: raw,
    protocol: url.protocol,
    hostname: url.hostname,
    port: hasExplicitPort(raw) ? url.port || defaultPort(url.protocol) : null,
    path: url.pathname || "/",
  };
}

/** FLEET_ALLOWED_BASE_URLS: comma-separated prefixes; empty or unset: none. */
export function parseAllowedBaseUrls(value: string | undefined, variable = "FLEET_ALLOWED_BASE_URLS") {
  const entries = (value ?? "")
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s !== "");
  return entries.map((entry, i) => {
    try {
      return parseAllowedBaseUrl(entry);
    } catch (error) {
      throw new ValidationError(`${variable}[${i}]`, `"${shownEntry(entry)}" ${(error as Error).message}`);
    }
  });
}

/** `entry` as an error may quote it: a user name or password is not repeated (a log line of every role). */
function shownEntry(entry: string): string {
  try {
    const url = new URL(entry);
    if (url.username || url.password) return `${url.protocol}//…@${url.host}${url.pathname}`;
  } catch {
    // Not a URL: nothing in it is a password to the parser, nor to fetch.
  }
  return entry;
}

/**
 * Whether a segment of `path` (as the URL parser left it: dot segments resolved, the rest
 * percent-encoded) could still climb out of its place on a server that decodes it first: a
 * segment that decodes (up to three times) to hold `/` or `\`, to `.` or `..`, or to one of
 * those followed by `;` parameters. Malformed percent-encoding counts as such (pure).
 */
export function hidesDotSegment(path: string): boolean {
  for (const segment of path.split("/")) {
    let text = segment;
    for (let round = 0; round < 4; round++) {
      const bare = text.split(";", 1)[0]!;
      if (bare === "." || bare === ".." || /[/\\]/.test(text)) return true;
      if (!text.includes("%")) break;
      try {
        text = decodeURIComponent(text);
      } catch {
        return true;
      }
    }
  }
  return false;
}

function pathUnder(path: string, prefix: string): boolean {
  if (hidesDotSegment(path)) return false;
  if (prefix === "/" || path === prefix) return true;
  return path.startsWith(prefix.endsWith("/") ? prefix : `${prefix}/`);
}

/** Whether `url` lies under one of the allowed prefixes (see the file comment). */
export function isAllowedBaseUrl(url: string, allowed: readonly AllowedBaseUrl[]): boolean {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return false;
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") return false;
  // fetch refuses such URLs, and credentials of the caller's own have no place in a stored agent.
  if (parsed.username || parsed.password) return false;
  const port = parsed.port || defaultPort(parsed.protocol);
  return allowed.some(
    (a) =>
      a.protocol === parsed.protocol &&
      a.hostname === parsed.hostname &&
      (a.port === null || a.port === port) &&
      pathUnder(parsed.pathname, a.path),
  );
}
