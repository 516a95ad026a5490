/**
 * The kinds of value the configuration's variables take (config-schema.ts): whole numbers,
 * timer delays, ports, and the Postgres and Redis URLs, each with the words an operator fixes a
 * bad one by.
 */
import { z } from "zod";

export const int = (def: number) => z.coerce.number().int().nonnegative().default(def);
/**
 * The longest delay a Node timer takes (2^31-1 ms, about 24.8 days): a longer one fires after
 * 1 ms, so a huge value meant as "never" would act at once (a sweep every millisecond, every
 * model step timed out). Every variable that feeds a timer is at most this.
 */
export const MAX_TIMER_MS = 2_147_483_647;
const TIMER_WORDS = `at most ${MAX_TIMER_MS} (about 24.8 days, the longest a timer waits)`;
/** Milliseconds a timer waits (0 allowed unless `positive`). */
export const timerMs = (def: number, positive = false) =>
  (positive ? z.coerce.number().int().positive() : z.coerce.number().int().nonnegative())
    .max(MAX_TIMER_MS, TIMER_WORDS)
    .default(def);
/** A TCP port: 0 (a free one) to 65535, as the roles' --port flags take it. */
export const port = (def: number) =>
  z.coerce.number().int().min(0).max(65535, "expected a port from 0 to 65535").default(def);
const POSTGRES_EXAMPLE = "postgres://user@host:5432/agent_fleet";
/**
 * Why a URL of a known scheme does not parse, in the words an operator fixes it by: a port past
 * 65535 or one that is no number (the usual typos), else a character out of place.
 */
export function whyUrlDoesNotParse(url: string): string {
  const authority = (url.split("://")[1] ?? "").split(/[/?#]/)[0]!;
  const hostPort = authority.slice(authority.lastIndexOf("@") + 1);
  const port = hostPort.startsWith("[") ? hostPort.split("]:")[1] : hostPort.split(":")[1];
  if (port !== undefined && /^\d+$/.test(port)) return `its port ${port} is past 65535`;
  if (port !== undefined && port !== "") return `its port ${JSON.stringify(port)} is not a number`;
  return "is not a URL (a character out of place?)";
}
/**
 * Whether a URL's user information holds a character a URL reserves, not percent-encoded: an
 * `@` after the first `/`, `?` or `#` that follows the scheme, where the parser has already
 * ended the host (an `@` before it is fine: the last `@` ends the user information). The
 * parser then read a piece of the password as the port ("its port \"w\" is not a number",
 * printed) or as the host. False positive: an `@` in a query value (`?application_name=a@b`),
 * which %40 spells as well.
 */
export function reservedInUserinfo(url: string): boolean {
  const rest = url.slice(url.indexOf("://") + 3);
  const hostEnd = rest.search(/[/?#]/);
  return url.includes("://") && hostEnd >= 0 && rest.lastIndexOf("@") > hostEnd;
}
const RESERVED_WORDS =
  "its user name or password holds a character a URL reserves: percent-encode them " +
  "(@ %40, : %3A, / %2F, ? %3F, # %23, % %25; encodeURIComponent does it)";

/** Postgres URL: every role reads its database name from it (new URL), so it must parse. */
export const postgresUrl = z.string().superRefine((url, ctx) => {
  if (!/^postgres(ql)?:/i.test(url))
    ctx.addIssue({ code: "custom", message: `expected a postgres:// URL, e.g. ${POSTGRES_EXAMPLE}` });
  else if (reservedInUserinfo(url)) ctx.addIssue({ code: "custom", message: RESERVED_WORDS });
  // It said "expected a postgres:// URL" of postgres://host:99999/db too, as if the scheme were wrong.
  else if (!URL.canParse(url))
    ctx.addIssue({
      code: "custom",
      message: `${whyUrlDoesNotParse(url)}: expected e.g. ${POSTGRES_EXAMPLE}`,
    });
  // libpq's socket form (`?host=/var/run/postgresql`): postgres.js sent `host` to the server as
  // a setting, and every role stopped with "cannot reach Postgres … Start it" of a running one.
  // With no host in the URL it takes the socket's directory from PGHOST.
  else if (new URL(url).searchParams.has("host"))
    ctx.addIssue({
      code: "custom",
      message:
        'postgres.js reads no "host" parameter (it went to the server as a setting): for a Unix socket, ' +
        "leave the host out of the URL and name the socket's directory in PGHOST, e.g. PGHOST=/var/run/postgresql " +
        "DATABASE_URL=postgres:///agent_fleet (the user in PGUSER); for a TCP host, put it after the //",
    });
});

/**
 * Why a `redis://` / `rediss://` URL's database number (its path) is no whole number, or
 * undefined when it is one or there is none. ioredis sends `SELECT path` as it connects and,
 * refused, only emits an error event: `/x` failed a role's first command later (exit 70).
 */
export function whyRedisDatabaseIsWrong(url: string): string | undefined {
  if (!/^rediss?:\/\//i.test(url) || !URL.canParse(url)) return undefined;
  const db = decodeURIComponent(new URL(url).pathname.slice(1));
  if (db === "" || /^\d+$/.test(db)) return undefined;
  return `the database number ${JSON.stringify(db)} after the port is not a whole number: expected e.g. redis://host:6379/0`;
}

/** Redis URL (redis.ts parses it; a cluster's seed list is checked there, node by node). */
export const redisUrl = z
  .string()
  .refine(
    // ioredis reads anything else (http://…) as a socket path: "connect ENOENT //host:port".
    (url) => /^(rediss?(\+cluster)?:\/\/|\/)/i.test(url),
    "expected redis://, rediss://, redis+cluster:// or rediss+cluster:// (or a socket path)",
  )
  // Before the parse below, which said "a character out of place?" of such a URL.
  .refine((url) => !/^rediss?(\+cluster)?:/i.test(url) || !reservedInUserinfo(url), RESERVED_WORDS)
  .refine(
    // redis.ts parses it with new URL (a cluster's seed list is checked there, node by node):
    // one that does not parse stopped every role with "Invalid URL", exit 1, naming nothing.
    (url) => !/^rediss?:\/\//i.test(url) || reservedInUserinfo(url) || URL.canParse(url),
    "is not a URL (a port past 65535, a character out of place?): expected e.g. redis://user:password@host:6379/0",
  )
  .superRefine((url, ctx) => {
    const why = whyRedisDatabaseIsWrong(url);
    if (why) ctx.addIssue({ code: "custom", message: why });
  });
