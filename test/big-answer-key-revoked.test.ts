/**
 * A big unpaged answer (`GET /v1/sessions/:id` of a session of megabytes, sent in pieces as its
 * reader takes them: big-answers.ts) whose key is revoked while it is sent ends, as a batch's
 * results read and an event stream do (README "Tenants and API keys"). Before, it went on for
 * as long as its reader took a piece now and then (FLEET_SSE_STALL_MS apart at most): a reader
 * that read slowly went on receiving a whole transcript with a key revoked long before.
 */
import { connect, type Socket } from "node:net";
import { afterAll, beforeAll, expect, it } from "vitest";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };
/** About 12 MB of history: more than the loopback socket's buffers hold. */
const BIG_HISTORY = [
  { role: "user" as const, content: "q".repeat(6_000_000) },
  { role: "assistant" as const, content: "a".repeat(6_000_000), stopReason: "end_turn" },
];

let fleet: FleetEnv;
beforeAll(async () => {
  // A reader that takes nothing is not cut for that while the test runs.
  fleet = await createFleetEnv("bigansrevoked", { env: { FLEET_SSE_STALL_MS: "600000" } });
}, 60_000);
afterAll(() => fleet?.close());

/** Sends `GET path` with `key` and reads nothing once the answer's head has come. */
async function pausedAfterHead(
  port: number,
  path: string,
  key: string,
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
  socket.write(`GET ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${key}\r\n\r\n`);
  await waitFor(() => received.includes("\r\n\r\n"), 20_000, "the big answer's head");
  expect(received.slice(0, 12)).toBe("HTTP/1.1 200");
  return { socket, closed: () => closed };
}

it("a big session's answer read with a key revoked meanwhile ends before it is all sent", async () => {
  const keys = new ApiKeys(fleet.database);
  const key = await keys.create("acme");
  const { api } = await fleet.startApi();
  const auth = { authorization: `Bearer ${key.key}` };
  const created = await fetch(`${api.url}/v1/sessions`, {
    method: "POST",
    headers: { ...auth, "content-type": "application/json" },
    body: JSON.stringify({ agent: AGENT, messages: BIG_HISTORY }),
  });
  expect(created.status).toBe(201);
  const { id } = (await created.json()) as { id: string };
  const reader = await pausedAfterHead(Number(new URL(api.url).port), `/v1/sessions/${id}`, key.key);
  await keys.revoke(key.id);
  await waitFor(
    async () => (await fetch(`${api.url}/v1/sessions`, { headers: auth })).status === 401,
    30_000,
    "the revoked key refused",
  );
  // The answer asks every second whether its key still works, as a results read does.
  // (A paused socket sees the close only once it writes: the API's end answers it with a reset.)
  await waitFor(
    () => {
      if (!reader.closed()) reader.socket.write("\r\n");
      return reader.closed();
    },
    20_000,
    "the big answer's connection closed once its key was revoked",
  );
  reader.socket.destroy();
}, 120_000);
