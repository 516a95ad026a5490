/**
 * `GET /v1/batches/:id/results` reads its sessions a page at a time; a page is bounded by
 * the size of its outputs too (500 outputs of megabytes each were read at once). Through the
 * real API on a real Postgres: a batch whose outputs are 1 MiB each streams every result
 * once, in session-id order, and the store's page stops at its byte budget.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BatchStore } from "../src/shared/store/batches.js";
import { readAnswer } from "./support/answer.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };
const SESSIONS = 6;
const OUTPUT = 1024 * 1024;

describe("batch results paged by the size of their outputs", () => {
  let fleet: FleetEnv;
  let base: string;
  let batchId: string;
  const ids: string[] = [];

  beforeAll(async () => {
    fleet = await createFleetEnv("resultsbytes");
    base = (await fleet.startApi()).api.url;
    const sessions = Array.from({ length: SESSIONS }, (_, i) => ({
      agent: AGENT,
      customId: `c${i}`,
      messages: [
        { role: "user", content: `question ${i}` },
        { role: "assistant", content: `${i}`.repeat(OUTPUT), stopReason: "end_turn" },
      ],
    }));
    const created = await readAnswer(
      await fetch(`${base}/v1/batches`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ sessions }),
      }),
    );
    expect(created.status, created.text.slice(0, 300)).toBe(201);
    batchId = created.json.id;
    for (const s of created.json.sessions) ids.push(s.id);
  }, 120_000);
  afterAll(() => fleet?.close());

  it("a store page stops at its byte budget, at least one result, and the next page goes on", async () => {
    const store = new BatchStore(fleet.database);
    const first = await store.resultsPage(batchId, "", 500, 3 * OUTPUT);
    const one = await store.resultsPage(batchId, "", 500, 1);
    const whole = await store.resultsPage(batchId, "", 500);
    console.log(
      `results per page of ${SESSIONS} outputs of 1 MiB: budget 3 MiB → ${first.length}, budget 1 byte → ${one.length}, no budget → ${whole.length}`,
    );
    expect(first.length).toBe(2);
    expect(one.length).toBe(1);
    expect(whole.length).toBe(SESSIONS);
    const next = await store.resultsPage(batchId, first.at(-1)!.id, 500, 3 * OUTPUT);
    expect(next[0]!.id > first.at(-1)!.id).toBe(true);
  });

  it("the NDJSON stream has every session once, in session-id order, with its whole output", async () => {
    const response = await fetch(`${base}/v1/batches/${batchId}/results`);
    expect(response.status).toBe(200);
    const lines = (await response.text())
      .trim()
      .split("\n")
      .map((line) => JSON.parse(line));
    expect(lines.map((l) => l.sessionId)).toEqual([...ids].sort());
    for (const line of lines) expect(line.output).toHaveLength(OUTPUT);
  });
});
