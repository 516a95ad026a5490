/**
 * A client that sends `GET path` on a raw socket and reads nothing once the answer's head has
 * come: for tests of answers held by readers that take nothing (places, stall timers).
 */
import { connect, type Socket } from "node:net";
import { expect } from "vitest";
import { waitFor } from "./fleet-env.js";

/**
 * Sends `GET path` to 127.0.0.1:`port` (as `key`'s tenant when given) and pauses its socket
 * after the answer's head (a 200).
 */
export async function pausedAfterHead(
  port: number,
  path: string,
  key?: string,
): Promise<{ socket: Socket; closed: () => boolean }> {
  const socket = connect(port, "127.0.0.1");
  let received = "";
  let closed = false;
  socket.on("error", () => {});
  socket.on("close", () => {
    closed = true;
  });
  await new Promise<void>((resolve) => socket.once("connect", () => resolve()));
  const onData = (chunk: Buffer) => {
    received += chunk.toString("latin1");
    if (!received.includes("\r\n\r\n")) return;
    socket.pause();
    socket.off("data", onData);
  };
  socket.on("data", onData);
  const authorization = key === undefined ? "" : `authorization: Bearer ${key}\r\n`;
  socket.write(`GET ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\n${authorization}\r\n`);
  await waitFor(() => received.includes("\r\n\r\n"), 20_000, "the big answer's head");
  expect(received.slice(0, 12)).toBe("HTTP/1.1 200");
  return { socket, closed: () => closed };
}
