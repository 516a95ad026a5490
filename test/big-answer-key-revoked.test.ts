/**
 * A big unpaged answer (`GET /v1/sessions/:id` of a session of megabytes, sent in pieces as its
 * reader takes them: big-answers.ts) whose key is revoked while it is sent ends, as a batch's
 * results read and an event stream do (README "Tenants and API keys"). Before, it went on for
 * as long as its reader took a piece now and then (FLEET_SSE_STALL_MS apart at most): a reader
 * that read slowly went on receiving a whole transcript with a key revoked long before.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { pausedAfterHead } from "./support/paused-reader.js";

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
