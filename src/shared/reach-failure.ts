/**
 * Why a start's check could not reach Postgres or Redis, when starting a server would not
 * help: a host name that does not resolve, or TLS asked (`sslmode=require`, `rediss://`) of a
 * server that has none. Both were said as a server that is not running, with "Start it (e.g.
 * `docker run …`)" (test/preflight-tls-and-names.test.ts). Undefined for any other failure,
 * which keeps preflight.ts's words (pure).
 */

/** Postgres's sslmode values (libpq) under which postgres.js insists on TLS. */
const TLS_MODES = new Set(["require", "verify-ca", "verify-full"]);

function asksTls(service: "Postgres" | "Redis", url: string): boolean {
  if (service === "Redis") return /^rediss(\+cluster)?:/i.test(url);
  if (!URL.canParse(url)) return false;
  const params = new URL(url).searchParams;
  return TLS_MODES.has(params.get("sslmode") ?? "") || params.get("ssl") === "true";
}

/**
 * The words for a failed check of `service` at `url` (`shown`: the URL with its password
 * masked), from the error's message, or undefined.
 */
export function reachFailure(
  service: "Postgres" | "Redis",
  url: string,
  shown: string,
  message: string,
): string | undefined {
  const unresolved = /\b(?:ENOTFOUND|EAI_AGAIN) (\S+)/.exec(message);
  if (unresolved)
    return `the host "${unresolved[1]}" of ${shown} does not resolve (${message}): check its spelling, or the DNS this machine uses`;
  if (!asksTls(service, url)) return undefined;
  // A Postgres without TLS answers postgres.js's SSLRequest "no", and the socket is closed
  // mid-handshake; a Redis without TLS reads the ClientHello as a command and waits for more.
  if (service === "Postgres" && /TLS|SSL/i.test(message))
    return `Postgres at ${shown} did not take a TLS connection (${message}): DATABASE_URL asks for TLS (sslmode); turn ssl on in the server, or remove sslmode if it has none`;
  if (service === "Redis" && /ETIMEDOUT|TLS|SSL|ECONNRESET/i.test(message))
    return `Redis at ${shown} did not take a TLS connection (${message}): rediss:// asks for TLS; use redis:// for a Redis without it`;
  return undefined;
}
