/**
 * `GET /v1/batches/:id/results` to a client that stays connected but reads nothing (stuck, or
 * holding the API's memory on purpose): once its connection's buffers are full, the answer is
 * closed after FLEET_SSE_STALL_MS without a drain, as an event stream is. Before, nothing
 * bounded it: the answer held its page of results (up to ~8 MiB of outputs) and its connection
 * for as long as TCP kept it, and any number of such readers grew the API's memory without
 * bound. A client that reads, however slowly, gets every line.
 */
import { connect, type Socket } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };
/** 12 sessions with an answer of 900 KB each: more than the loopback socket's buffers hold. */
const SESSIONS = Array.from({ length: 12 }, (_, i) => ({
  agent: AGENT,
  customId: `big-${i}`,
  messages: [
    { role: "user" as const, content: "write a lot" },
    {
      role: "assistant" as const,
      content: String.fromCharCode(97 + i).repeat(900_000),
      stopReason: "end_turn",
    },
  ],
}));

describe("a batch's results to a reader that takes nothing", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let port: number;

  beforeAll(async () => {
    fleet = await createFleetEnv("resultsstall", { env: { FLEET_SSE_STALL_MS: "1000" } });
    const started = await fleet.startApi();
    client = started.client;
    port = Number(new URL(started.api.url).port);
  }, 60_000);
  afterAll(() => fleet?.close());

  it("is closed once its buffers stay full for FLEET_SSE_STALL_MS; a reader that reads gets every line", async () => {
    const batch = await client.createBatch(SESSIONS);
    // A raw connection that sends the request and never reads the answer.
    const socket: Socket = connect(port, "127.0.0.1");
    let closed = false;
    socket.on("error", () => {});
    socket.on("close", () => {
      closed = true;
    });
    await new Promise<void>((resolve) => socket.once("connect", () => resolve()));
    socket.pause();
    socket.write(`GET /v1/batches/${batch.id}/results HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n`);
    // The reader's socket is paused, so it sees no FIN; it sees the connection reset once it
    // writes to a connection the API closed. An empty line before a request line is ignored by
    // an HTTP server (RFC 9112 §2.2): on an open connection these writes change nothing.
    await waitFor(
      () => {
        if (!closed) socket.write("\r\n");
        return closed;
      },
      20_000,
      "the API to close the results of a reader that takes nothing",
    );
    socket.destroy();

    // A reader that reads gets the whole answer, each session once.
    const outputs: string[] = [];
    for await (const result of client.batchResults(batch.id)) outputs.push(result.output ?? "");
    expect(outputs.map((output) => output.length)).toEqual(SESSIONS.map(() => 900_000));
    expect(outputs.map((output) => output[0])).toEqual(SESSIONS.map((_, i) => String.fromCharCode(97 + i)));
  }, 60_000);

  it("a client that pauses past FLEET_SSE_STALL_MS between lines still gets every line once: batchResults() goes on after the last", async () => {
    const batch = await client.createBatch(SESSIONS);
    const seen: string[] = [];
    for await (const result of client.batchResults(batch.id)) {
      seen.push(result.customId ?? "");
      // The caller's work on its first line outlasts the stall: the API closes the answer, and
      // the iterator reads on with `?after=` that line's session.
      if (seen.length === 1) await new Promise((resolve) => setTimeout(resolve, 4_000));
    }
    expect(seen).toEqual(SESSIONS.map((session) => session.customId));
  }, 60_000);
});
