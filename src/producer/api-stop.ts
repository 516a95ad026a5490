/**
 * How the API's HTTP server stops (after its drain, FLEET_API_DRAIN_MS): it takes no new
 * connection, closes each idle one, and gives the busy ones API_BUSY_CONNECTIONS_WAIT_MS to
 * end; any still open then are closed, said in one line with their count.
 *
 * Node's `server.close()` (which Fastify's `close()` calls) waits for every connection to
 * end, and on its own it closes only the idle ones it finds at that moment: a request still
 * arriving (a body sent slowly, up to FLEET_API_REQUEST_TIMEOUT_MS), a streamed answer its
 * client does not read, or a keep-alive connection whose request was answered after the
 * close (then idle for Fastify's keep-alive timeout, 72 s) held the stop past its exit
 * deadline (`fleet api` exited 1). And it took an answer ended but not yet written out (a big
 * one to a client reading slowly) for idle, and cut it: an answered request lost.
 */
import type { Server, ServerResponse } from "node:http";
import type { Socket } from "node:net";
import type { Logger } from "pino";

/**
 * How long the stop waits for busy connections before it closes them. Counted within the
 * API's exit deadline (shutdown.ts STOP_CLOSE_MS, 10 s), with the pools' own bounded closes.
 */
export const API_BUSY_CONNECTIONS_WAIT_MS = 3_000;

/** How often the stop closes connections that became idle meanwhile. */
const IDLE_CHECK_MS = 100;

/** What the stop does next (pure): it is over, it waits, or it closes what is still open. */
export function stopStep(closed: boolean, waitedMs: number, waitMs: number): "stopped" | "wait" | "force" {
  if (closed) return "stopped";
  return waitedMs >= waitMs ? "force" : "wait";
}

/** The line said when busy connections are closed. */
export function forcedMessage(count: number, waitMs: number): string {
  return `${count} connection${count === 1 ? "" : "s"} still busy ${waitMs} ms after the API stopped taking connections (a request still arriving, an answer its client does not read): closed`;
}

/**
 * The server's connections, each with the answers it still owes (a request begun whose
 * response has not been written out whole). Replaces the server's `closeIdleConnections` (what
 * `server.close()` calls) by one that leaves a connection owing an answer open.
 */
export class ServerConnections {
  private readonly open = new Set<Socket>();
  private readonly owed = new Map<Socket, number>();

  constructor(server: Server) {
    server.on("connection", (socket: Socket) => {
      this.open.add(socket);
      socket.once("close", () => {
        this.open.delete(socket);
        this.owed.delete(socket);
      });
    });
    server.on("request", (request: { socket: Socket }, response: ServerResponse) => {
      const socket = request.socket;
      this.owed.set(socket, (this.owed.get(socket) ?? 0) + 1);
      let settled = false;
      // `finish`: the answer handed to the OS whole; `close`: it never will be.
      const done = () => {
        if (settled) return;
        settled = true;
        const left = (this.owed.get(socket) ?? 1) - 1;
        if (left > 0) this.owed.set(socket, left);
        else this.owed.delete(socket);
      };
      response.once("finish", done);
      response.once("close", done);
    });
    server.closeIdleConnections = () => this.closeIdle();
  }

  /** Closes every connection that owes no answer. */
  closeIdle(): void {
    for (const socket of this.open) if (!this.owed.has(socket)) socket.destroy();
  }

  /** Closes every connection; returns how many were open. */
  closeAll(): number {
    const count = this.open.size;
    for (const socket of this.open) socket.destroy();
    return count;
  }
}

/**
 * Runs `close` (Fastify's, which closes the server) and waits for it at most `waitMs`,
 * closing connections that become idle meanwhile (a keep-alive connection whose answer was
 * just sent); then closes those still open, with one warning, and waits for `close` to end.
 */
export async function closeServerWithin(
  close: () => Promise<unknown>,
  connections: ServerConnections,
  log: Pick<Logger, "warn">,
  waitMs = API_BUSY_CONNECTIONS_WAIT_MS,
): Promise<void> {
  const started = Date.now();
  let closed = false;
  const closing = close().finally(() => {
    closed = true;
  });
  for (;;) {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      closing.catch(() => {}),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, IDLE_CHECK_MS);
      }),
    ]);
    clearTimeout(timer);
    const step = stopStep(closed, Date.now() - started, waitMs);
    switch (step) {
      case "stopped":
        return closing.then(() => {});
      case "wait":
        connections.closeIdle();
        continue;
      case "force": {
        const count = connections.closeAll();
        if (count > 0) log.warn({ connections: count, waitedMs: waitMs }, forcedMessage(count, waitMs));
        await closing;
        return;
      }
    }
  }
}
