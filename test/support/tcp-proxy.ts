/**
 * A TCP proxy on a free local port to a port of 127.0.0.1 (a private Redis), for partitions and
 * failovers: `target()` names the port each new connection goes to (a failover moves it), or
 * null to refuse it; `cut()` drops every connection it carries. `holds(sent)`, given what a
 * new connection has sent so far (before any answer: a Redis client's handshake), says
 * whether to keep that connection open without forwarding anything (true), to forward it
 * (false), or to wait for more of it (undefined): a client that connected but was never
 * answered, its connection never ready.
 */
import { connect, createServer, type Socket } from "node:net";
import { freePort } from "./private-redis.js";

export type TcpProxy = { port: number; cut(): void; close(): Promise<void> };

export async function startTcpProxy(
  target: () => number | null,
  holds?: (sent: Buffer) => boolean | undefined,
): Promise<TcpProxy> {
  const sockets = new Set<Socket>();
  const track = (s: Socket) => {
    sockets.add(s);
    s.on("error", () => {});
    s.on("close", () => sockets.delete(s));
  };
  const forward = (socket: Socket, port: number, first?: Buffer) => {
    const upstream = connect(port, "127.0.0.1");
    track(upstream);
    if (first) upstream.write(first);
    socket.pipe(upstream).pipe(socket);
    socket.on("close", () => upstream.destroy());
    upstream.on("close", () => socket.destroy());
  };
  const server = createServer((socket) => {
    const port = target();
    if (port === null) return socket.destroy();
    track(socket);
    if (!holds) return forward(socket, port);
    let sent = Buffer.alloc(0);
    const read = (chunk: Buffer) => {
      sent = Buffer.concat([sent, chunk]);
      const held = holds(sent);
      if (held === undefined) return;
      socket.off("data", read);
      socket.pause();
      if (!held) forward(socket, port, sent);
    };
    socket.on("data", read);
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
