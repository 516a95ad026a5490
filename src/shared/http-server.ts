/** A tiny HTTP server for /metrics and /healthz on workers and the sweeper. */
import { createServer, type Server } from "node:http";
import type { Redis } from "ioredis";
import type { Registry } from "prom-client";
import type { Database } from "./db/client.js";

/** The /healthz check of every process: Postgres and Redis both answer. */
export function servicesReachable(database: Database, redis: Redis): () => Promise<boolean> {
  return async () => {
    await database.sql`select 1`;
    return (await redis.ping()) === "PONG";
  };
}

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
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
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
