/**
 * Redis connections. Workers wait for Redis to come back; producers fail fast.
 *
 * REDIS_URL names one Redis (`redis://…`, `rediss://…`) or a Redis Cluster by its seed nodes:
 * `redis+cluster://[user:password@]host:port[,host:port…]` (`rediss+cluster://` for TLS).
 * A cluster connection is an ioredis Cluster, typed as Redis here: it answers the same
 * commands, routed by key. What a cluster needs of the code base:
 * - every key of a fleet shares one hash tag, the braces of the effective FLEET_PREFIX
 *   (config.ts makes `fleet` `{fleet}`), so BullMQ's scripts and ours, which touch several
 *   keys at once, find them all on one node;
 * - a command about the server rather than a key (CLIENT LIST, SCAN) must ask every master:
 *   `masters()` lists them.
 */
import type { Cluster, ClusterOptions, Redis } from "ioredis";
import { ioredis } from "./cjs-packages.js";

export type RedisRole = "worker" | "producer";

/** A REDIS_URL, parsed: one server, or the seed nodes of a cluster. */
export type RedisTarget =
  | { mode: "single"; url: string }
  | {
      mode: "cluster";
      nodes: { host: string; port: number }[];
      username: string | undefined;
      password: string | undefined;
      tls: boolean;
    };

const CLUSTER_URL = /^(rediss?)\+cluster:\/\/(?:([^@/]*)@)?([^/?#]+)\/?$/i;

/** Parses REDIS_URL; throws an Error saying what is wrong with a cluster URL. */
export function parseRedisUrl(url: string): RedisTarget {
  if (!/^rediss?\+cluster:/i.test(url)) return { mode: "single", url };
  const match = CLUSTER_URL.exec(url);
  if (!match)
    throw new Error(
      "a cluster URL is redis+cluster://[user:password@]host:port[,host:port...] (no database number: a cluster has only 0)",
    );
  const [, scheme, auth, hosts] = match;
  const nodes = hosts!.split(",").map((part) => {
    const node = /^(\[[^\]]+\]|[^:]+)(?::(\d+))?$/.exec(part.trim());
    if (!node) throw new Error(`"${part}" is not host:port`);
    return { host: node[1]!.replace(/^\[|\]$/g, ""), port: Number(node[2] ?? 6379) };
  });
  let username: string | undefined;
  let password: string | undefined;
  if (auth !== undefined) {
    const colon = auth.indexOf(":");
    username = decodeURIComponent(colon < 0 ? auth : auth.slice(0, colon)) || undefined;
    password = colon < 0 ? undefined : decodeURIComponent(auth.slice(colon + 1)) || undefined;
  }
  return { mode: "cluster", nodes, username, password, tls: scheme!.toLowerCase() === "rediss" };
}

/** Whether REDIS_URL names a cluster. */
export function isClusterUrl(url: string): boolean {
  return parseRedisUrl(url).mode === "cluster";
}

/** Whether a connection createRedis made is a cluster's. */
export function isCluster(redis: Redis): boolean {
  return (redis as unknown as { isCluster?: boolean }).isCluster === true;
}

/**
 * The servers to ask a server-wide command (CLIENT LIST, SCAN): the connection itself, or
 * every master of a cluster. Throws while a cluster does not know its masters yet (before
 * its first slot map): an empty answer would read as "nobody is connected".
 */
export function masters(redis: Redis): Redis[] {
  if (!isCluster(redis)) return [redis];
  const nodes = (redis as unknown as Cluster).nodes("master");
  if (nodes.length === 0) throw new Error("Redis Cluster: no master known yet (slots not loaded)");
  return nodes;
}

/** Resolves once a cluster connection has its slot map (at once for one server or a ready cluster). */
export async function clusterReady(redis: Redis, timeoutMs = 10_000): Promise<void> {
  if (!isCluster(redis) || redis.status === "ready") return;
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      redis.off("ready", onReady);
      reject(new Error(`Redis Cluster not ready after ${timeoutMs} ms`));
    }, timeoutMs);
    const onReady = () => {
      clearTimeout(timer);
      resolve();
    };
    redis.once("ready", onReady);
  });
}

/** Every key matching `pattern`, on every master (SCAN, never KEYS). */
export async function scanKeys(redis: Redis, pattern: string): Promise<string[]> {
  await clusterReady(redis);
  const keys: string[] = [];
  for (const node of masters(redis)) {
    let cursor = "0";
    do {
      const [next, found] = await node.scan(cursor, "MATCH", pattern, "COUNT", 500);
      keys.push(...found);
      cursor = next;
    } while (cursor !== "0");
  }
  return keys;
}

/** Deletes every key matching `pattern` (one key a command: keys need not share a slot). */
export async function deleteKeys(redis: Redis, pattern: string): Promise<number> {
  const keys = await scanKeys(redis, pattern);
  await Promise.all(keys.map((key) => redis.del(key)));
  return keys.length;
}

/** How long a connection meeting READONLY sends its commands again (a failover's time). */
const READONLY_RESEND_MS = 5_000;
/** READONLY after this long without one starts a new failover. */
const READONLY_QUIET_MS = 10_000;

/**
 * ioredis's `reconnectOnError` for one connection. A failover behind one address (managed
 * Redis) leaves open connections on the old primary, now a replica that answers every write
 * READONLY; ioredis would stay there. Reconnecting reaches the new primary, and for
 * READONLY_RESEND_MS the command is sent again (2: a replica ran none of it). A Redis that
 * stays read-only (REDIS_URL names a replica) then gets its commands refused with the error
 * (1), each still reconnecting, rather than sent again for ever while every write hangs.
 */
export function readonlyReconnect(now: () => number = Date.now): (error: Error) => false | 1 | 2 {
  let since = 0;
  let last = Number.NEGATIVE_INFINITY;
  return (error) => {
    if (!error.message.startsWith("READONLY")) return false;
    const at = now();
    if (at - last > READONLY_QUIET_MS) since = at;
    last = at;
    return at - since < READONLY_RESEND_MS ? 2 : 1;
  };
}

/**
 * A connection to REDIS_URL. `name` (CLIENT SETNAME) is given to every node connection of a
 * cluster, and a named cluster connection connects to every master at once, so the name is
 * listed wherever the sweeper looks (liveness.ts).
 */
export function createRedis(url: string, role: RedisRole, name?: string): Redis {
  const target = parseRedisUrl(url);
  if (target.mode === "cluster") return createCluster(target, role, name);
  const redis = new ioredis.Redis(url, {
    // BullMQ workers need null (block forever); a producer should fail fast instead.
    maxRetriesPerRequest: role === "worker" ? null : 1,
    enableOfflineQueue: true,
    connectionName: name,
    retryStrategy: (times) => Math.min(50 * 2 ** Math.min(times, 6), 2_000),
    reconnectOnError: readonlyReconnect(),
    lazyConnect: false,
  });
  // ioredis reconnects by itself; the commands that fail meanwhile report their own errors,
  // and RedisOutageLog (redis-outage.ts) says once that Redis is away. Without a listener
  // every failed reconnect attempt would print an "Unhandled error event".
  redis.on("error", () => {});
  return redis;
}

/**
 * A connection for one check (preflight.ts): not connected until `connect()`, no retries,
 * no offline queue, `timeoutMs` (FLEET_PREFLIGHT_TIMEOUT_MS, 5 s) to connect and as much for
 * each command's answer. Without the
 * latter a Redis that accepts connections but answers nothing (frozen, hung) held a role's
 * start for ever: the connect timeout ends at the TCP handshake, which the kernel completes.
 * A cluster's when REDIS_URL names one.
 */
export function createProbe(url: string, timeoutMs = 5_000): Redis {
  const target = parseRedisUrl(url);
  if (target.mode === "single")
    return new ioredis.Redis(url, {
      lazyConnect: true,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
      connectTimeout: timeoutMs,
      commandTimeout: timeoutMs,
    });
  return new ioredis.Cluster(target.nodes, {
    ...clusterDnsLookup(target.tls),
    lazyConnect: true,
    enableOfflineQueue: false,
    clusterRetryStrategy: () => null,
    redisOptions: {
      maxRetriesPerRequest: 0,
      connectTimeout: timeoutMs,
      commandTimeout: timeoutMs,
      username: target.username,
      password: target.password,
      ...(target.tls ? { tls: {} } : {}),
    },
  }) as unknown as Redis;
}

/**
 * A TLS cluster's seed hosts are connected to by name, not first resolved to an IP (ioredis's
 * default `dnsLookup`): a managed cluster's certificate names its hosts (ElastiCache:
 * `*.cache.amazonaws.com`), so a TLS connection made to the resolved IP failed its check
 * ("IP: … is not in the cert's list") and the fleet never got the slot map. The identity
 * lookup is what ioredis prescribes for TLS clusters.
 */
export function clusterDnsLookup(tls: boolean): Pick<ClusterOptions, "dnsLookup"> {
  return tls ? { dnsLookup: (address, callback) => callback(null, address) } : {};
}

/**
 * How many times a worker's command on a cluster is redirected or retried before it fails
 * (ioredis's `maxRedirections`, default 16). While a master fails over, a command meets a
 * closed connection, `CLUSTERDOWN`, or `MOVED` to the dead master, each retried after 100 ms
 * (`retryDelayOnFailover`, `retryDelayOnClusterDown`) or at once after a `MOVED`: 16 tries
 * last about 1.6 s, less than any failover (the node timeout alone is 15 s on Redis's
 * defaults), so every command of a worker failed during one — lease renewals, event writes,
 * BullMQ's job moves (jobs failed), hundreds of warnings in a 4 s failover — where on one Redis
 * it waits (`maxRetriesPerRequest: null`). 1,000 tries, at least one 100 ms wait in every
 * two, wait out a failover of at least 50 s.
 */
export const WORKER_CLUSTER_REDIRECTIONS = 1_000;

/**
 * A worker's cluster node connection that has waited this long for any reply to a command it
 * sent is dropped (ioredis's `socketTimeout`), and the command goes where the cluster's slot
 * map now says. A master that hangs rather than dies (frozen, or cut off by a partition that
 * drops packets) keeps its socket open: its replica is promoted, yet every command sent to it
 * waited until it answered again (a SIGSTOP of 8 s held the fleet 7 s) or TCP gave up. Longer
 * than any command a worker sends is meant to wait: BullMQ blocks for at most 10 s.
 */
export const WORKER_CLUSTER_SOCKET_TIMEOUT_MS = 20_000;

/**
 * The same for a producer's (the API's, the CLI's) cluster node connection. It had none: a
 * request needing a master that hangs waited until that master answered again, however long,
 * while its replica had long been promoted. A producer sends no blocking command (the API's
 * event streams wait in SUBSCRIBE, whose reply comes at once), so it waits less than a
 * worker: a request is answered from the promoted replica, or `503`, instead of hanging.
 */
export const PRODUCER_CLUSTER_SOCKET_TIMEOUT_MS = 5_000;

function createCluster(
  target: Extract<RedisTarget, { mode: "cluster" }>,
  role: RedisRole,
  name: string | undefined,
): Redis {
  const cluster = new ioredis.Cluster(target.nodes, {
    ...clusterDnsLookup(target.tls),
    redisOptions: {
      maxRetriesPerRequest: role === "worker" ? null : 1,
      socketTimeout:
        role === "worker" ? WORKER_CLUSTER_SOCKET_TIMEOUT_MS : PRODUCER_CLUSTER_SOCKET_TIMEOUT_MS,
      connectionName: name,
      username: target.username,
      password: target.password,
      ...(target.tls ? { tls: {} } : {}),
    },
    enableOfflineQueue: true,
    clusterRetryStrategy: (times) => Math.min(50 * 2 ** Math.min(times, 6), 2_000),
    // A worker waits out a failover, as it waits for a single Redis; a producer fails fast.
    maxRedirections: role === "worker" ? WORKER_CLUSTER_REDIRECTIONS : 16,
    lazyConnect: false,
  });
  cluster.on("error", () => {});
  cluster.on("node error", () => {});
  if (name) {
    // Node connections are made on first use; a liveness connection must be listed on every
    // master from the start, and again after a reconnect or a new slot map.
    const touch = () => {
      for (const node of cluster.nodes("master")) if (node.status === "wait") node.connect().catch(() => {});
    };
    cluster.on("ready", touch);
    cluster.on("refresh", touch);
  }
  return cluster as unknown as Redis;
}

/**
 * Closes a connection even when it is already broken. One that is not connected right now
 * is dropped at once: a QUIT would wait in the offline queue for a Redis that may not come
 * back, and a process stopping on SIGTERM would wait with it.
 */
export async function closeRedis(redis: Redis): Promise<void> {
  if (redis.status !== "ready") {
    redis.disconnect();
    return;
  }
  try {
    await redis.quit();
  } catch {
    redis.disconnect();
  }
}
