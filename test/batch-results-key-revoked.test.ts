/**
 * A batch's results read with a key that is revoked part-way end (contracts §10; README
 * "Tenants and API keys": an event stream asks every second whether its key still works).
 * The NDJSON answer of `GET /v1/batches/:id/results` pages through the batch as its reader
 * takes lines and never asked again: a reader that read slowly went on receiving every
 * output of a batch of any size with a key revoked hours before. Here a reader that has not
 * read for the cache window is handed the rest of 18 MB of outputs: before, all of it.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { KEY_RECHECK_MS } from "../src/producer/revoked-answers.js";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

const SESSIONS = 60;
/** 60 outputs of 300 KB: far more than the loopback socket's buffers hold (4 MB to send, 128 KB to receive). */
const OUTPUT = "x".repeat(300_000);
const AGENT = { model: { provider: "scripted", steps: [{ text: "ok" }] } };

let fleet: FleetEnv;
beforeAll(async () => {
  fleet = await createFleetEnv("resultskeyrevoked");
}, 60_000);
afterAll(() => fleet?.close());

it("a batch's results read with a key revoked meanwhile end before every result is sent", async () => {
  const keys = new ApiKeys(fleet.database);
  const key = await keys.create("acme");
  const { api } = await fleet.startApi();
  const auth = { authorization: `Bearer ${key.key}` };
  const post = async (path: string, body: unknown) => {
    const answer = await fetch(`${api.url}${path}`, {
      method: "POST",
      headers: { ...auth, "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    const json = (await answer.json()) as { id: string; sessions: { id: string }[] };
    expect(answer.status, JSON.stringify(json)).toBeLessThan(300);
    return json;
  };
  const batch = await post("/v1/batches", {
    sessions: Array.from({ length: SESSIONS }, () => ({ agent: AGENT })),
  });
  for (const { id } of batch.sessions)
    await post(`/v1/sessions/${id}/history`, {
      afterSeq: 0,
      messages: [
        { role: "user", content: "go" },
        { role: "assistant", content: OUTPUT, stopReason: "end_turn" },
      ],
    });
  const response = await fetch(`${api.url}/v1/batches/${batch.id}/results`, { headers: auth });
  expect(response.status).toBe(200);
  await keys.revoke(key.id);
  await waitFor(
    async () => (await fetch(`${api.url}/v1/sessions`, { headers: auth })).status === 401,
    30_000,
    "the revoked key refused",
  );
  // A reader that takes nothing for a while: the answer asks every second (KEY_RECHECK_MS)
  // whether its key still works; read at once, loopback hands 18 MB over within that second.
  await new Promise((resolve) => setTimeout(resolve, 2.5 * KEY_RECHECK_MS));
  // Now the reader reads on, as fast as it can.
  let lines = 0;
  let withOutput = 0;
  let carry = "";
  const decoder = new TextDecoder();
  try {
    for await (const chunk of response.body!) {
      const parts = (carry + decoder.decode(chunk as Uint8Array, { stream: true })).split("\n");
      carry = parts.pop()!;
      for (const line of parts) {
        lines++;
        if (line.includes(OUTPUT)) withOutput++;
      }
    }
  } catch (error) {
    // The API closes the connection once it finds the key revoked.
    if ((error as { cause?: { code?: string } }).cause?.code !== "UND_ERR_SOCKET") throw error;
  }
  expect(withOutput).toBe(lines);
  expect(lines).toBeGreaterThan(0);
  expect(lines).toBeLessThan(SESSIONS);
}, 90_000);
