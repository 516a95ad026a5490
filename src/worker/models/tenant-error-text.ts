/**
 * A provider's error as its tenant reads it (pure): a run's `error`, its session's parked
 * reason, the batch results that quote it. An endpoint the operator declared
 * (FLEET_MODEL_ENDPOINTS) sits where the operator put it, often on an internal network: the
 * errors of its requests name it (a refused redirect "to another path of
 * http://10.0.0.5:8000"), and its server's own text may name more of that network (a gateway's
 * 404 "not found at http://llm-gw.corp.internal:8000/v1/…"). For tenants, the endpoint's
 * origin, `host:port` and host name read `endpoint "NAME"`, and every other URL's origin in
 * such an error `[another host]` (its path stays), as does a host it names without a scheme (an
 * IP address, a host name with a port). The worker's "provider error" line keeps the
 * message whole, with the endpoint's `host` (logged-provider.ts): the operator sees where.
 * A MODEL with a raw `baseUrl` names its URL itself, and the providers' own hosts are public:
 * their errors are left as they are.
 */
import type { ProviderErrorInfo } from "./provider.js";

export const ANOTHER_HOST = "[another host]";

/** `scheme://authority`: a URL's origin, up to its path, query or fragment. */
const ORIGIN = /\b[a-z][a-z0-9+.-]*:\/\/(?:\[[0-9a-f:.]+\]|[^\s/?#"'<>()[\]{}\\,;:@]+)(?::\d+)?/gi;

const escaped = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

/** `text` with every whole occurrence of `word` (not inside a longer name) replaced by `by`. */
function replaceWord(text: string, word: string, by: string): string {
  if (word === "") return text;
  const pattern = new RegExp(`(?<![A-Za-z0-9.-])${escaped(word)}(?![A-Za-z0-9-]|\\.[A-Za-z0-9])`, "gi");
  return text.replace(pattern, by);
}

/** The host of `origin` (`host[:port]`, lower case), or undefined when it is no URL. */
function hostOfOrigin(origin: string): string | undefined {
  try {
    return new URL(origin).host.toLowerCase();
  } catch {
    return undefined;
  }
}

/** `message` as a tenant may read it, for an error of the route `info` describes (see the file comment). */
export function tenantErrorText(message: string, info: ProviderErrorInfo | undefined): string {
  if (info?.endpoint === undefined || info.host === undefined) return message;
  const name = `endpoint ${JSON.stringify(info.endpoint)}`;
  const host = info.host.toLowerCase();
  const hostname = host.startsWith("[") ? host.slice(0, host.indexOf("]") + 1) : host.replace(/:\d+$/, "");
  const withoutOrigins = message.replace(ORIGIN, (origin) =>
    hostOfOrigin(origin) === host ? name : ANOTHER_HOST,
  );
  const withoutEndpoint = replaceWord(replaceWord(withoutOrigins, host, name), hostname, name);
  return withoutEndpoint
    .replace(BARE_IPV4, ANOTHER_HOST)
    .replace(BARE_IPV6, ANOTHER_HOST)
    .replace(NAME_AND_PORT, ANOTHER_HOST);
}

/**
 * Hosts a server names without a scheme: a gateway's upstream that is away ("Cannot connect to
 * host 10.0.0.9:11434 … ('10.0.0.9', 11434)", "ollama.corp.internal:11434"). An IPv4 address
 * (with its port, if any), a bracketed IPv6 address, a dotted host name with a port.
 */
const BARE_IPV4 = /(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?::\d{1,5})?(?![\w.])/g;
const BARE_IPV6 = /\[[0-9a-f]*:[0-9a-f:.]*\](?::\d{1,5})?/gi;
const NAME_AND_PORT =
  /(?<![\w.@/-])[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)+:\d{1,5}(?!\w)/gi;
