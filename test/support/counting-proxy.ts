/**
 * A TCP proxy on a free local port to 127.0.0.1:`port` (the shared Postgres) that counts the
 * bytes the server sends back through it: for tests that prove a request read nothing (or
 * read a lot) from the database, by what came back rather than by time.
 */
import { connect, createServer, type Socket } from "node:net";
import { freePort } from "./private-redis.js";

export type CountingProxy = {
  port: number;
  /** `url` with its host and port swapped for the proxy's. */
  urlFor(url: string): string;
  /** Bytes the server sent back since the proxy started. */
  received(): number;
  close(): Promise<void>;
};

export async function startCountingProxy(port = 5432): Promise<CountingProxy> {
  const sockets = new Set<Socket>();
  let received = 0;
  const track = (socket: Socket) => {
    sockets.add(socket);
    socket.on("error", () => {});
    socket.on("close", () => sockets.delete(socket));
  };
  const server = createServer((client) => {
    track(client);
    const upstream = connect(port, "127.0.0.1");
    track(upstream);
    upstream.on("data", (chunk: Buffer) => (received += chunk.length));
    client.pipe(upstream).pipe(client);
    client.on("close", () => upstream.destroy());
    upstream.on("close", () => client.destroy());
  });
  const own = await freePort();
  await new Promise<void>((resolve) => server.listen(own, "127.0.0.1", resolve));
  return {
    port: own,
    urlFor: (url) => {
      const next = new URL(url);
      next.hostname = "127.0.0.1";
      next.port = String(own);
      return next.toString();
    },
    received: () => received,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
