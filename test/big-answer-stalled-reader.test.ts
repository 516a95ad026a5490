/**
 * A big unpaged answer (`GET /v1/sessions/:id` of a session of megabytes) holds one of the
 * API's places for big work (big-bodies.ts, FLEET_API_MAX_BIG_BODIES: 2) until it is sent or its
 * client is gone — and request bodies of 1 MiB or more, such as a part of a batch, wait for the
 * same places. A client that stays connected and reads nothing never lets its answer be sent:
 * two of them held both places for as long as TCP kept their connections, and every tenant's
 * big batch waited behind them (then got 429 `big_bodies`). Such an answer is now closed once
 * its buffers stay full for FLEET_SSE_STALL_MS, as an event stream and a batch's results are; it
 * is sent in pieces, so a reader that reads slowly takes a piece now and then and is never cut.
 * (The pieces themselves: big-answer-pieces.test.ts.)
 */
import { connect } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { pausedAfterHead } from "./support/paused-reader.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };
/** About 12 MB of history: more than the loopback socket's buffers hold. */
const BIG_HISTORY = [
  { role: "user" as const, content: "q".repeat(6_000_000) },
  { role: "assistant" as const, content: "a".repeat(6_000_000), stopReason: "end_turn" },
];

describe("big answers to readers that take nothing", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let port: number;

  beforeAll(async () => {
    fleet = await createFleetEnv("bigstall", { env: { FLEET_SSE_STALL_MS: "1000" } });
    const started = await fleet.startApi();
    client = started.client;
    port = Number(new URL(started.api.url).port);
  }, 60_000);
  afterAll(() => fleet?.close());

  it("do not hold the places of big work: a big batch behind two of them is created", async () => {
    const { id } = await client.createSession({ agent: AGENT, messages: BIG_HISTORY });
    // Two readers take both places (FLEET_API_MAX_BIG_BODIES) and read nothing.
    const readers = [await pausedAfterHead(port, `/v1/sessions/${id}`)];
    readers.push(await pausedAfterHead(port, `/v1/sessions/${id}`));
    // A part of a batch of more than 1 MiB waits for one of those places.
    let created: string | undefined;
    const part = [1, 2].map((i) => ({ agent: AGENT, customId: `p${i}`, input: `${i}`.repeat(600_000) }));
    const submitted = client.createBatch(part).then((batch) => {
      created = batch.id;
    });
    submitted.catch(() => {});
    await waitFor(
      () => created !== undefined,
      20_000,
      "the big batch behind the stalled readers to be created",
    );
    await submitted;
    // The readers' places were freed by closing them: their paused sockets see it once they write.
    await waitFor(
      () => {
        for (const reader of readers) if (!reader.closed()) reader.socket.write("\r\n");
        return readers.every((reader) => reader.closed());
      },
      20_000,
      "the API to close the big answers of readers that take nothing",
    );
  }, 60_000);

  it("a reader that reads slowly, for longer than FLEET_SSE_STALL_MS in all, gets the whole answer", async () => {
    const { id } = await client.createSession({ agent: AGENT, messages: BIG_HISTORY });
    const socket = connect(port, "127.0.0.1");
    socket.on("error", () => {});
    const chunks: Buffer[] = [];
    let ended = false;
    socket.on("end", () => {
      ended = true;
    });
    // Each piece read, the reader waits 20 ms before it takes the next: ~12 MB in ~200 pieces.
    socket.on("data", (chunk: Buffer) => {
      chunks.push(chunk);
      socket.pause();
      setTimeout(() => socket.resume(), 20);
    });
    await new Promise<void>((resolve) => socket.once("connect", () => resolve()));
    socket.write(`GET /v1/sessions/${id} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n`);
    await waitFor(() => ended, 50_000, "the whole big answer to the slow reader");
    const answer = Buffer.concat(chunks).toString("utf8");
    const [head = "", body = ""] = answer.split("\r\n\r\n", 2);
    expect(head.slice(0, 12)).toBe("HTTP/1.1 200");
    const session = JSON.parse(body) as { messages: { content: string }[] };
    expect(session.messages.map((message) => message.content.length)).toEqual([6_000_000, 6_000_000]);
  }, 60_000);
});
