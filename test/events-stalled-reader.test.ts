/**
 * An event-stream reader that stays connected but stops reading (its socket paused: a client
 * stuck, or one holding slots on purpose) no longer holds its tenant's stream slot for as long
 * as TCP lives. Before, the stream waited for its socket's `drain` with nothing else looked at:
 * the slot (FLEET_SSE_MAX_STREAMS_PER_TENANT) stayed taken, every further reader of the tenant
 * got 429, and the key was not asked about again, so a revoked key's stream went on with the
 * rest of its page whenever the reader read again. Now a socket that has not drained for
 * FLEET_SSE_STALL_MS is closed, and the key is asked about every second while it waits: a
 * revoked key's stream is closed at once, whatever the reader does later.
 */
import { connect, type Socket } from "node:net";
import { afterAll, describe, expect, it } from "vitest";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { writeBigBacklog } from "./support/event-backlog.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

/** 12 MB of events: more than the loopback socket's buffers hold (4 MB to send, 128 KB to receive). */
const EVENTS = 4_000;
const MAX_BYTES = 64 * 1024 * 1024;

const fleets: FleetEnv[] = [];
afterAll(async () => {
  for (const fleet of fleets) await fleet.close();
});

/** A fleet with one API, a session of tenant acme and `keys` keys of that tenant. */
async function setUp(name: string, env: Record<string, string>, keyCount: number) {
  const fleet = await createFleetEnv(name, {
    env: { FLEET_EVENTS_MAX_BYTES: String(MAX_BYTES), FLEET_SSE_MAX_STREAMS_PER_TENANT: "1", ...env },
  });
  fleets.push(fleet);
  const apiKeys = new ApiKeys(fleet.database);
  const keys = [];
  for (let i = 0; i < keyCount; i++) keys.push(await apiKeys.create("acme"));
  const { api } = await fleet.startApi();
  const created = await fetch(`${api.url}/v1/sessions`, {
    method: "POST",
    headers: { authorization: `Bearer ${keys[0]!.key}`, "content-type": "application/json" },
    body: JSON.stringify({ agent: { model: { provider: "scripted", steps: [{ text: "ok" }] } } }),
  });
  const { id } = (await created.json()) as { id: string };
  return { fleet, apiKeys, keys, url: api.url, id };
}

/** A raw TCP reader of the session's stream that reads its answer's head, then stops reading. */
async function pausedReader(url: string, id: string, key: string) {
  const { port } = new URL(url);
  const socket: Socket = connect(Number(port), "127.0.0.1");
  let head = "";
  let closed = false;
  socket.on("close", () => {
    closed = true;
  });
  await new Promise<void>((resolve, reject) => {
    socket.once("error", reject);
    socket.write(
      `GET /v1/sessions/${id}/events HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${key}\r\naccept: text/event-stream\r\n\r\n`,
    );
    const onData = (chunk: Buffer) => {
      head += chunk.toString("latin1");
      if (!head.includes("\r\n\r\n")) return;
      socket.off("data", onData);
      socket.pause();
      resolve();
    };
    socket.on("data", onData);
  });
  expect(head).toMatch(/^HTTP\/1\.1 200/);
  return { socket, closed: () => closed };
}

/** Writes the backlog the paused reader cannot take. */
async function writeBacklog(fleet: FleetEnv, id: string) {
  await writeBigBacklog(fleet, id, EVENTS, MAX_BYTES);
}

/** The status of a new stream request of the tenant (200: a slot was free; 429: none). */
async function streamStatus(url: string, id: string, key: string): Promise<number> {
  const controller = new AbortController();
  const response = await fetch(`${url}/v1/sessions/${id}/events`, {
    headers: { authorization: `Bearer ${key}`, accept: "text/event-stream" },
    signal: controller.signal,
  });
  controller.abort();
  await response.body?.cancel().catch(() => {});
  return response.status;
}

describe("an event-stream reader that stops reading", () => {
  it("is closed once its socket has not drained for FLEET_SSE_STALL_MS, freeing its tenant's slot", async () => {
    const { fleet, keys, url, id } = await setUp("sse-stalled", { FLEET_SSE_STALL_MS: "1500" }, 1);
    const key = keys[0]!.key;
    const reader = await pausedReader(url, id, key);
    // The one slot is taken.
    expect(await streamStatus(url, id, key)).toBe(429);
    await writeBacklog(fleet, id);
    await waitFor(async () => (await streamStatus(url, id, key)) === 200, 30_000, "the slot freed");
    // The stalled reader's connection is closed: reading on, it gets what was sent, then the end.
    reader.socket.resume();
    await waitFor(() => reader.closed(), 30_000, "the stalled reader's connection closed");
  }, 90_000);

  it("is closed once its key is revoked, without reading again first", async () => {
    // The default stall time (60 s): only the revocation can end it within the wait below.
    const { fleet, apiKeys, keys, url, id } = await setUp("sse-stalled-revoked", {}, 2);
    const reader = await pausedReader(url, id, keys[0]!.key);
    await writeBacklog(fleet, id);
    expect(await streamStatus(url, id, keys[1]!.key)).toBe(429);
    await apiKeys.revoke(keys[0]!.id);
    // The key's cache (5 s) expires, the stream asks again and ends: the tenant's slot is free,
    // while the reader has still read nothing.
    await waitFor(async () => (await streamStatus(url, id, keys[1]!.key)) === 200, 20_000, "the slot freed");
    let bytes = 0;
    reader.socket.on("data", (chunk: Buffer) => {
      bytes += chunk.length;
    });
    reader.socket.resume();
    await waitFor(() => reader.closed(), 30_000, "the revoked reader's connection closed");
    // What the sockets held when the stream was closed, not the rest of the backlog (12 MB).
    expect(bytes).toBeLessThan(EVENTS * 3_000);
  }, 90_000);
});
