/** A tiny HTTP server for /metrics and /healthz on workers and the sweeper. */
import { createServer, type Server } from "node:http";
import type { Redis } from "ioredis";
import type { Registry } from "prom-client";
import type { Database } from "./db/client.js";
import { ValidationError } from "./errors.js";

/**
 * Where a process listens, and the setting and flag that choose it; `hostSetting` chooses the
 * address (HOST for the API), named when that is what cannot be listened on.
 */
export type ListenTarget = {
  setting: string;
  flag: string;
  host: string;
  port: number;
  hostSetting?: string;
};

/** The API's settings and flag: PORT (`--port`) and HOST. */
export const API_LISTEN = { setting: "PORT", flag: "--port", hostSetting: "HOST" } as const;

/**
 * What a failed listen means to the person who started the process: a port another process
 * holds (or one this user may not open) becomes a one-line ValidationError naming the setting
 * to change (`fleet` exits 2); any other error is returned as it is.
 */
export function listenError(error: unknown, target: ListenTarget): unknown {
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  const { setting, flag, host, port } = target;
  const change = `set ${setting} (or ${flag}) to another port`;
  if (code === "EADDRINUSE")
    return new ValidationError(
      setting,
      `port ${port} on ${host} is already in use by another process: stop it, or ${change}`,
    );
  if (code === "EACCES")
    return new ValidationError(setting, `not allowed to listen on port ${port} on ${host}: ${change}`);
  const hostSetting = target.hostSetting ?? setting;
  if (code === "EADDRNOTAVAIL")
    return new ValidationError(hostSetting, `cannot listen on ${host}: no such address on this machine`);
  // A name that does not resolve (a typo; `[::1]` written as in a URL).
  if (code === "ENOTFOUND" || code === "EAI_AGAIN" || code === "EAI_FAIL") {
    const brackets = /^\[(.*)\]$/.exec(host);
    return new ValidationError(
      hostSetting,
      `cannot listen on ${host}: no such address or host name (${(error as Error).message})` +
        (brackets ? `; an IPv6 address goes without brackets: ${brackets[1]}` : ""),
    );
  }
  return error;
}

/**
 * Makes `server` answer a client that half-closes its connection after its request (`printf
 * 'GET …' | nc -q0`, shutdown(SHUT_WR)): Node's http.Server ends the connection at the
 * client's FIN unless `httpAllowHalfOpen` (a property Node reads in its FIN handling, no
 * constructor option) is true, so an answer written after an await went into a closed
 * socket. With it, the connection ends once the answers owed on it are written (Node marks
 * the last), or at once when none is owed. A half-close does not mean the client lost
 * interest in the answer (httpwg/http-core#22 and #431, for RFC 9112). A route that waits
 * for ever (an event stream) must end at the socket's `end` itself (event-stream.ts).
 */
export function answerHalfClosedClients(server: Server): void {
  (server as Server & { httpAllowHalfOpen: boolean }).httpAllowHalfOpen = true;
}

/** How long /healthz waits for Postgres and Redis to answer before it says no (503). */
export const HEALTH_TIMEOUT_MS = 2_000;

/**
 * The /healthz check of every process: Postgres and Redis both answer, within `timeoutMs`.
 * A Redis connection that is not ready is a no at once: a worker's connection queues
 * commands until Redis is back (BullMQ needs that), so its PING would never be answered
 * and a probe would hang instead of failing.
 */
export function servicesReachable(
  database: Database,
  redis: Pick<Redis, "ping" | "status">,
  timeoutMs = HEALTH_TIMEOUT_MS,
): () => Promise<boolean> {
  return async () => {
    if (redis.status !== "ready") return false;
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(false), timeoutMs);
    });
    const check = (async () => {
      await database.sql`select 1`;
      return (await redis.ping()) === "PONG";
    })();
    // A check that fails after the timeout has answered is not an unhandled rejection.
    check.catch(() => {});
    try {
      return await Promise.race([check, late]);
    } finally {
      clearTimeout(timer);
    }
  };
}

/**
 * Serves /metrics and /healthz on `port` (0: a free one). A port in use rejects with a
 * ValidationError naming METRICS_PORT.
 */
export async function startMetricsServer(
  registry: Registry,
  port: number,
  healthy: () => Promise<boolean>,
): Promise<{ server: Server; port: number; close: () => Promise<void> }> {
  const server = createServer((req, res) => {
    const url = req.url ?? "/";
    if (url.startsWith("/metrics")) {
      registry.metrics().then(
        (body) => {
          res.writeHead(200, { "content-type": registry.contentType });
          res.end(body);
        },
        () => {
          res.writeHead(500).end();
        },
      );
      return;
    }
    if (url.startsWith("/healthz")) {
      healthy().then(
        (ok) =>
          res.writeHead(ok ? 200 : 503, { "content-type": "application/json" }).end(JSON.stringify({ ok })),
        () => res.writeHead(503).end(JSON.stringify({ ok: false })),
      );
      return;
    }
    res
      .writeHead(404, { "content-type": "application/json" })
      .end('{"error":{"code":"not_found","message":"not found"}}');
  });
  // Both answers come after an await.
  answerHalfClosedClients(server);
  await new Promise<void>((resolve, reject) => {
    server.once("error", (error) =>
      reject(listenError(error, { setting: "METRICS_PORT", flag: "--metrics-port", host: "0.0.0.0", port })),
    );
    server.listen(port, "0.0.0.0", () => resolve());
  });
  const address = server.address();
  const actual = typeof address === "object" && address ? address.port : port;
  return {
    server,
    port: actual,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/**
 * Starts the metrics server first thing in a role, or — when its port cannot be had —
 * closes what the role opened so far (`closeOpened`) and throws, so nothing left open keeps
 * the process alive. `serve: false`: no server (an in-process role in tests).
 */
export async function startMetricsOrClose(
  serve: boolean,
  registry: Registry,
  port: number,
  healthy: () => Promise<boolean>,
  closeOpened: () => Promise<void>,
): Promise<Awaited<ReturnType<typeof startMetricsServer>> | null> {
  if (!serve) return null;
  try {
    return await startMetricsServer(registry, port, healthy);
  } catch (error) {
    await closeOpened();
    throw error;
  }
}
