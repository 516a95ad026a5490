/**
 * `GET /v1/batches/:id/results?after=` takes a session id (a result line's `sessionId`,
 * contracts §9): the lines after that session's. Anything else was compared as text with the
 * batch's session ids, so a customId (what a caller most easily has at hand) silently answered
 * fewer lines or none, and an upper-case id every line again. Now a value that is no session
 * id is a 400 naming `after`; an upper-case one is read as the id it spells.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };
const ENDED = ["a", "b", "c"].map((customId) => ({
  agent: AGENT,
  customId,
  messages: [
    { role: "user" as const, content: "hi" },
    { role: "assistant" as const, content: `done ${customId}`, stopReason: "end_turn" },
  ],
}));

describe("a batch's results ?after=", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let base: string;

  beforeAll(async () => {
    fleet = await createFleetEnv("resultsaftercheck");
    const started = await fleet.startApi();
    client = started.client;
    base = started.api.url;
  }, 60_000);
  afterAll(() => fleet?.close());

  it("is a session id: a customId is a 400 naming `after`; an upper-case id reads as itself", async () => {
    const batch = await client.createBatch(ENDED);
    const lines: { customId: string; sessionId: string }[] = [];
    for await (const line of client.batchResults(batch.id))
      lines.push({ customId: line.customId ?? "", sessionId: line.sessionId });
    expect(lines.map((line) => line.customId)).toEqual(["a", "b", "c"]);

    const byCustomId = await fetch(`${base}/v1/batches/${batch.id}/results?after=a`);
    expect(byCustomId.status).toBe(400);
    expect(await byCustomId.json()).toMatchObject({ error: { field: "after" } });

    const upper = await fetch(
      `${base}/v1/batches/${batch.id}/results?after=${lines[0]!.sessionId.toUpperCase()}`,
    );
    const rest = (await upper.text())
      .split("\n")
      .filter(Boolean)
      .map((line) => (JSON.parse(line) as { customId: string }).customId);
    expect(rest).toEqual(["b", "c"]);
  }, 60_000);
});
