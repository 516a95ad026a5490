/**
 * An event stream whose key is revoked ends however many events it still has to send
 * (contracts §10; README "Tenants and API keys": a stream opened before its key was revoked
 * ends within about 6 s too). The stream asked whether its key still worked only when it had
 * caught up with its session: a reader behind by a backlog — a slow one, or one following a
 * session that keeps writing — went on receiving the session's events with a revoked key
 * until it caught up, which a busy session may never let it do. Here a reader that has not
 * read for the cache window is handed the rest of an 8,000-event backlog: before, all of it;
 * now the stream ends after the page it was writing, at the first page after the API refuses
 * the key.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { writeBigBacklog } from "./support/event-backlog.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

const EVENTS = 8_000;
/** 24 MB of events: far more than the loopback socket's buffers hold (4 MB to send, 128 KB to receive). */
const MAX_BYTES = 64 * 1024 * 1024;

let fleet: FleetEnv;
beforeAll(async () => {
  fleet = await createFleetEnv("streamkeyrevoked", { env: { FLEET_EVENTS_MAX_BYTES: String(MAX_BYTES) } });
}, 60_000);
afterAll(() => fleet?.close());

it("a stream behind by a backlog ends once its key is revoked, before the backlog is sent", async () => {
  const keys = new ApiKeys(fleet.database);
  const key = await keys.create("acme");
  const { api } = await fleet.startApi();
  const auth = { authorization: `Bearer ${key.key}` };
  const created = await fetch(`${api.url}/v1/sessions`, {
    method: "POST",
    headers: { ...auth, "content-type": "application/json" },
    body: JSON.stringify({ agent: { model: { provider: "scripted", steps: [{ text: "ok" }] } } }),
  });
  const { id } = (await created.json()) as { id: string };
  const response = await fetch(`${api.url}/v1/sessions/${id}/events`, {
    headers: { ...auth, accept: "text/event-stream" },
  });
  expect(response.status).toBe(200);
  // The session writes its backlog; the reader reads none of it yet (its socket fills up).
  await writeBigBacklog(fleet, id, EVENTS, MAX_BYTES);
  await keys.revoke(key.id);
  // Until the API no longer takes the key (its cache of the key has expired).
  await waitFor(
    async () => (await fetch(`${api.url}/v1/sessions`, { headers: auth })).status === 401,
    30_000,
    "the revoked key refused",
  );
  // Now the reader reads on, as fast as it can.
  let sent = 0;
  let carry = "";
  const decoder = new TextDecoder();
  try {
    for await (const chunk of response.body!) {
      const text = carry + decoder.decode(chunk as Uint8Array, { stream: true });
      sent += text.match(/\nevent: MESSAGE\n/g)?.length ?? 0;
      carry = text.slice(-20);
    }
  } catch (error) {
    // The API ends such a stream between pages, or, when it finds the key revoked while it
    // waits for the reader to drain its socket, closes the connection outright so that what
    // the buffers hold is not sent either (event-stream-drain.ts): both are the stream ending.
    if ((error as { cause?: { code?: string } }).cause?.code !== "UND_ERR_SOCKET") throw error;
  }
  expect(sent).toBeGreaterThan(0);
  // What the socket's buffers held (about 1,300 events here) and the page being written when
  // the reader took them; not the rest of the backlog. Before, the stream asked about the key
  // at most every second, and a reader that drained fast got ~4,900 (or, once on a loaded CI,
  // all 8,000) in the second after the API refused the key.
  expect(sent).toBeLessThan(3_000);
}, 90_000);
