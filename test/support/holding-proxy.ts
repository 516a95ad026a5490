/**
 * A proxy to Redis that holds what a connection sends from the first chunk naming `marker`
 * until `release()`: a moment of a request held deterministically (say, between its commit
 * in Postgres and the job it adds). `reached` resolves once that chunk has arrived.
 */
import { connect, createServer, type Socket } from "node:net";

export type HoldingProxy = {
  port: number;
  reached: Promise<void>;
  release: () => void;
  close: () => Promise<void>;
};

export async function holdingProxy(port: number, marker: string): Promise<HoldingProxy> {
  let held = false;
  let release!: () => void;
  const released = new Promise<void>((resolve) => {
    release = resolve;
  });
  let seen!: () => void;
  const reached = new Promise<void>((resolve) => {
    seen = resolve;
  });
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    const upstream = connect(port, "127.0.0.1");
    for (const s of [socket, upstream]) {
      sockets.add(s);
      s.on("error", () => {});
    }
    upstream.on("data", (d) => socket.write(d));
    let holding = false;
    socket.on("data", (d: Buffer) => {
      if (!holding && !held && d.includes(marker)) {
        held = holding = true;
        seen();
        socket.pause();
        void released.then(() => {
          upstream.write(d);
          socket.resume();
        });
        return;
      }
      upstream.write(d);
    });
    socket.on("close", () => upstream.destroy());
    upstream.on("close", () => socket.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  return {
    port: typeof address === "object" && address ? address.port : 0,
    reached,
    release,
    close: () => {
      for (const s of sockets) s.destroy();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
