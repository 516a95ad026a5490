/**
 * A TCP proxy on a free local port to a port of 127.0.0.1 (a private Redis), for partitions and
 * failovers: `target()` names the port each new connection goes to (a failover moves it), or
 * null to refuse it; `cut()` drops every connection it carries.
 */
import { connect, createServer, type Socket } from "node:net";
import { freePort } from "./private-redis.js";

export type TcpProxy = { port: number; cut(): void; close(): Promise<void> };

export async function startTcpProxy(target: () => number | null): Promise<TcpProxy> {
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    const port = target();
    if (port === null) return socket.destroy();
    const upstream = connect(port, "127.0.0.1");
    for (const s of [socket, upstream]) {
      sockets.add(s);
      s.on("error", () => {});
      s.on("close", () => sockets.delete(s));
    }
    socket.pipe(upstream).pipe(socket);
    socket.on("close", () => upstream.destroy());
    upstream.on("close", () => socket.destroy());
  });
  const port = await freePort();
  await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
  const cut = () => {
    for (const s of sockets) s.destroy();
  };
  return {
    port,
    cut,
    close: async () => {
      cut();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
