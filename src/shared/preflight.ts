/**
 * Checks that Postgres and Redis answer before a command starts, and says which one does
 * not and how to start it (instead of a driver's stack trace). The long-lived roles also
 * check that their database exists and is migrated, before they say they are ready.
 */
import { constants } from "node:fs";
import { access } from "node:fs/promises";
import postgres from "postgres";
import type { FleetConfig } from "./config.js";
import { foreignJournalText, journalState, newerJournalText } from "./db/journal-state.js";
import { readRecordedMigrations, shippedJournal } from "./db/migrate.js";
import { ValidationError } from "./errors.js";
import { makeDirectory, PRIVATE_DIRECTORY_MODE } from "./make-directory.js";
import { reachFailure } from "./reach-failure.js";
import { createProbe, isClusterUrl } from "./redis.js";
import { startPostgresHint, startRedisHint } from "./start-hints.js";
import { claimFleet } from "./store/fleet-identity.js";

function redact(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = "***";
    return u.toString();
  } catch {
    // A cluster's seed list (`redis+cluster://user:secret@h:1,h:2`) is no URL to the parser.
    return url.replace(/\/\/([^:@/]*):[^@/]*@/, "//$1:***@");
  }
}

/**
 * Why Postgres did not answer. SQLSTATE class 28 (a role that does not exist, a wrong
 * password, pg_hba.conf) means it did answer and refused the login, 53300 that it is full:
 * starting it would not help.
 */
function unreachablePostgres(url: string, error: unknown): ValidationError {
  // 53300: it runs and every connection it allows (max_connections, a role's or database's limit) is taken.
  if ((error as { code?: unknown }).code === "53300")
    return new ValidationError(
      "DATABASE_URL",
      `Postgres at ${redact(url)} takes no more connections (${(error as Error).message}): ` +
        "close what holds them, or raise max_connections (or the role's or database's CONNECTION LIMIT).",
    );
  // Each connection was taken and closed before Postgres's answer (answeredWithin): something
  // listens there, so starting a Postgres on that port would not help either.
  if ((error as { code?: unknown }).code === NOT_POSTGRES)
    return new ValidationError(
      "DATABASE_URL",
      `what answered at ${redact(url)} is not Postgres (${(error as Error).message}): ` +
        "is DATABASE_URL's port another service's, or a proxy with no Postgres behind it? " +
        "(Postgres listens on 5432 unless told otherwise)",
    );
  if ((error as { code?: unknown }).code?.toString().startsWith("28"))
    return new ValidationError(
      "DATABASE_URL",
      `Postgres at ${redact(url)} refused the login (${(error as Error).message}): ` +
        "fix the user name or password in DATABASE_URL (or the server's pg_hba.conf).",
    );
  const wrongWay = reachFailure("Postgres", url, redact(url), (error as Error).message);
  if (wrongWay) return new ValidationError("DATABASE_URL", wrongWay);
  return new ValidationError(
    "DATABASE_URL",
    `cannot reach Postgres at ${redact(url)} (${(error as Error).message}). Start it (e.g. ` +
      `${startPostgresHint(url)}) or set DATABASE_URL.`,
  );
}

/** Waits of a check (FLEET_PREFLIGHT_TIMEOUT_MS); its default when a caller has no config. */
const PREFLIGHT_TIMEOUT_MS = 5_000;
/** The `code` of answeredWithin's error. */
const NOT_POSTGRES = "FLEET_NOT_POSTGRES";

/**
 * A check's statements, given at most the check's wait and a second more. A server that
 * closes each connection during its start-up (a web server, a proxy with nothing behind it:
 * HAProxy with no backend up, Docker's published port while its container starts) fails
 * them with CONNECTION_CLOSED (scripts/patch-postgres.mjs, patch 7; before it, postgres.js
 * connected again at once, for ever, porsager/postgres#1193): they are sent again, after
 * postgres.js's backoff, until Postgres answers (a proxy whose Postgres is starting) or the
 * wait is over. The extra second leaves a server that answers nothing to postgres.js's own
 * CONNECT_TIMEOUT.
 */
async function answeredWithin<T>(timeoutMs: number, work: () => Promise<T>): Promise<T> {
  const ms = timeoutMs + 1_000;
  let timer: NodeJS.Timeout | undefined;
  let over = false;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      over = true;
      const error = new Error(`each connection closed without a Postgres answer, for ${ms / 1_000} s`);
      reject(Object.assign(error, { code: NOT_POSTGRES }));
    }, ms);
  });
  const answered = async (): Promise<T> => {
    for (;;) {
      try {
        return await work();
      } catch (error) {
        if (over || (error as { code?: unknown }).code !== "CONNECTION_CLOSED") throw error;
      }
    }
  };
  try {
    return await Promise.race([answered(), late]);
  } finally {
    over = true;
    clearTimeout(timer);
  }
}

export async function checkPostgres(
  url: string,
  database = "postgres",
  timeoutMs = PREFLIGHT_TIMEOUT_MS,
): Promise<void> {
  const admin = new URL(url);
  admin.pathname = `/${database}`;
  const sql = postgres(admin.toString(), { max: 1, connect_timeout: timeoutMs / 1_000, onnotice: () => {} });
  try {
    await answeredWithin(timeoutMs, () => sql`select 1`);
  } catch (error) {
    throw unreachablePostgres(url, error);
  } finally {
    await sql.end({ timeout: 1 }).catch(() => {});
  }
}

/**
 * Postgres answers, the database of DATABASE_URL exists, and every migration this code ships
 * has been applied to it (its `when` recorded in drizzle's table).
 */
export async function checkDatabase(
  url: string,
  timeoutMs = PREFLIGHT_TIMEOUT_MS,
): Promise<{ newerThanOurs: string | null }> {
  const sql = postgres(url, { max: 1, connect_timeout: timeoutMs / 1_000, onnotice: () => {} });
  const migrate = "run `fleet migrate` (it creates the database if needed and applies the migrations)";
  try {
    let recorded: number[];
    try {
      recorded = await answeredWithin(timeoutMs, () => readRecordedMigrations(sql));
    } catch (error) {
      const code = (error as { code?: string }).code;
      if (code === "3D000")
        throw new ValidationError("DATABASE_URL", `${redact(url)}: the database does not exist; ${migrate}`);
      if (code === "42P01" || code === "3F000")
        throw new ValidationError("DATABASE_URL", `${redact(url)}: the database is not migrated; ${migrate}`);
      throw unreachablePostgres(url, error);
    }
    const journalEntries = shippedJournal();
    const shipped = journalEntries.map((entry) => entry.when);
    const journal = journalState(recorded, shipped);
    if (journal.state === "foreign")
      throw new ValidationError(
        "DATABASE_URL",
        `${redact(url)}: ${foreignJournalText(journal.ours, shipped.length, journal.newest)}`,
      );
    if (journal.state === "behind")
      throw new ValidationError(
        "DATABASE_URL",
        `${redact(url)}: ${journal.ours} of ${shipped.length} migrations applied; ${migrate}`,
      );
    const lastTag = journalEntries.at(-1)?.tag ?? "none";
    return { newerThanOurs: journal.newer > 0 ? newerJournalText(journal.newer, lastTag) : null };
  } finally {
    await sql.end({ timeout: 1 }).catch(() => {});
  }
}

export async function checkRedis(url: string, timeoutMs = PREFLIGHT_TIMEOUT_MS): Promise<void> {
  // One server, or a cluster's seed nodes (redis.ts).
  const redis = createProbe(url, timeoutMs);
  let cause: Error | undefined;
  redis.on("error", (error: Error) => {
    cause ??= error;
  });
  try {
    await redis.connect();
    await redis.ping();
    if (!isClusterUrl(url)) {
      await refuseClusterNode(redis, url);
      await selectDatabase(redis, url);
    }
  } catch (thrown) {
    if (thrown instanceof ValidationError) throw thrown;
    // ioredis reports "Connection is closed"; the socket's own error says why.
    const error = cause ?? (thrown as Error);
    // It answered, and refused the user or password (ACL users, requirepass).
    if (/^(WRONGPASS|NOAUTH)\b/.test(error.message))
      throw new ValidationError(
        "REDIS_URL",
        `Redis at ${redact(url)} refused the login (${error.message}): fix the user name or password in REDIS_URL.`,
      );
    const notRedis = notRedisAnswer(error.message);
    if (notRedis)
      throw new ValidationError(
        "REDIS_URL",
        `what answered at ${redact(url)} is not Redis (${notRedis}): is REDIS_URL's port another service's? ` +
          "(Redis listens on 6379 unless told otherwise)",
      );
    const wrongWay = reachFailure("Redis", url, redact(url), error.message);
    if (wrongWay) throw new ValidationError("REDIS_URL", wrongWay);
    throw new ValidationError(
      "REDIS_URL",
      `cannot reach Redis at ${redact(url)} (${(error as Error).message}). Start it (e.g. ` +
        `${startRedisHint(url)}) or set REDIS_URL.`,
    );
  } finally {
    redis.disconnect();
  }
}

/**
 * REDIS_URL's database number, selected again on the check's connection: ioredis selects it
 * as it connects but, refused (a number past the server's `databases`), only emits an error
 * event and stays on database 0, where every role then ran, next to whatever else is there.
 */
async function selectDatabase(redis: ReturnType<typeof createProbe>, url: string): Promise<void> {
  if (!/^rediss?:\/\//i.test(url)) return;
  const db = new URL(url).pathname.slice(1);
  if (db === "" || Number(db) === 0) return;
  try {
    await redis.select(Number(db));
  } catch (error) {
    if (!/DB index is out of range/i.test((error as Error).message)) throw error;
    throw new ValidationError(
      "REDIS_URL",
      `Redis at ${redact(url)} has no database ${Number(db)} (${(error as Error).message}): ` +
        "give a number below its `databases` setting (16 unless configured), e.g. redis://host:6379/0",
    );
  }
}

/**
 * The answer of a server that is not Redis, from ioredis's error (`Unknown RESP type 72 "H".
 * Please report this.`: the first byte of `HTTP/1.1 400 …`, a web server such as the fleet's
 * own API at REDIS_URL's port), without its "report this"; undefined for any other error.
 */
export function notRedisAnswer(message: string): string | undefined {
  return /^Unknown RESP type \d+ "[^"]*"/.exec(message)?.[0];
}

/**
 * Whether a server named by a plain `redis://` URL runs in cluster mode (`INFO cluster`): one
 * connection to one node then gets `MOVED` for every key of a slot another node serves, and
 * `CROSSSLOT` for every BullMQ script of a prefix without a hash tag, yet answered PING.
 */
export function isClusterNodeInfo(info: string): boolean {
  return /^cluster_enabled:1\s*$/m.test(info);
}

/** A plain URL naming a node of a Redis Cluster is refused: it needs `redis+cluster://`. */
async function refuseClusterNode(redis: ReturnType<typeof createProbe>, url: string): Promise<void> {
  // A Redis refusing INFO is not refused for that: the check cannot tell.
  const info = await redis.info("cluster").catch(() => "");
  if (!isClusterNodeInfo(info)) return;
  const u = new URL(url);
  const auth = u.username || u.password ? `${u.username}${u.password ? ":***" : ""}@` : "";
  const cluster = `${u.protocol.replace(/:$/, "")}+cluster://${auth}${u.host}`;
  throw new ValidationError(
    "REDIS_URL",
    `${redact(url)} is a node of a Redis Cluster (cluster_enabled:1), named as one server: the fleet's ` +
      `keys would meet MOVED and CROSSSLOT. Name the cluster instead: REDIS_URL=${cluster} ` +
      "(see Redis Cluster and managed Redis in the README).",
  );
}

/**
 * Before `fleet api`, `fleet worker` or `fleet sweeper` says it is ready: its database is
 * reachable and migrated, Redis answers, and the database belongs to this fleet's prefix. Each failure is one ValidationError naming
 * DATABASE_URL or REDIS_URL (`fleet` prints it on one line and exits 2).
 */
export async function checkRoleServices(config: FleetConfig): Promise<{ newerThanOurs: string | null }> {
  const database = await checkDatabase(config.databaseUrl, config.preflightTimeoutMs);
  await checkRedis(config.redisUrl, config.preflightTimeoutMs);
  await checkFleet(config);
  return database;
}

/** The database belongs to this fleet (FLEET_PREFIX), or to none yet: see fleet-identity.ts. */
async function checkFleet(config: FleetConfig): Promise<void> {
  const sql = postgres(config.databaseUrl, {
    max: 1,
    connect_timeout: config.preflightTimeoutMs / 1_000,
    onnotice: () => {},
  });
  try {
    await claimFleet({ sql, url: config.databaseUrl }, config.prefix);
  } finally {
    await sql.end({ timeout: 1 }).catch(() => {});
  }
}

/**
 * A worker's FLEET_TOOL_DIR: created if missing and writable, checked before the worker says
 * it is ready, so a path the file tools cannot use stops it with one line (exit 2) instead of
 * an unhandled rejection (exit 70) that a supervisor restarts forever.
 */
export async function checkToolDir(dir: string): Promise<void> {
  try {
    await makeDirectory(dir);
    await access(dir, constants.W_OK);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? (error as Error).message;
    throw new ValidationError(
      "FLEET_TOOL_DIR",
      `cannot use ${dir} for the file tools (${code}): point FLEET_TOOL_DIR at a writable directory`,
    );
  }
}

/**
 * A worker's FLEET_TRANSCRIPT_DIR, when set: created (0700, parents too) if missing, and
 * writable. Checked before the worker says it is ready, so a file in its place or a parent
 * it cannot create stops it with one line (exit 2) instead of failing every transcript
 * write of the run. A directory that exists keeps its mode (transcript files are 0600).
 */
export async function checkTranscriptDir(dir: string): Promise<void> {
  try {
    await makeDirectory(dir, PRIVATE_DIRECTORY_MODE);
    await access(dir, constants.W_OK | constants.X_OK);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? (error as Error).message;
    throw new ValidationError(
      "FLEET_TRANSCRIPT_DIR",
      `cannot write transcripts in ${dir} (${code}): point FLEET_TRANSCRIPT_DIR at a writable directory, or unset it`,
    );
  }
}
