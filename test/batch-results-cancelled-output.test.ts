/**
 * A batch's results give `output` for a completed session only (README: "the last assistant
 * text of a completed session, otherwise null"). A session cancelled while its history still
 * ended in an answer — a follow-up queued to a completed session of the batch and cancelled
 * before a worker took it, or a run cancelled between storing its final answer and ending —
 * showed `status: "cancelled"` with the earlier answer as its `output`, as if it answered the
 * input that was cancelled.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { answeredEntries } from "./support/histories.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };
/** Sessions whose history ends with a final answer: the batch has ended once it is created. */
const ENDED = answeredEntries(AGENT);

describe("a batch's results of a session cancelled with an answer in its history", () => {
  let fleet: FleetEnv;
  let client: FleetClient;

  beforeAll(async () => {
    fleet = await createFleetEnv("resultscancelledout");
    client = (await fleet.startApi()).client;
  }, 60_000);
  afterAll(() => fleet?.close());

  it("have output null, as every session that is not completed", async () => {
    const batch = await client.createBatch(ENDED);
    const before = [];
    for await (const line of client.batchResults(batch.id)) before.push(line);
    const b = before.find((line) => line.customId === "b")!;
    // A follow-up no worker takes, then the cancel.
    await client.send(b.sessionId, "and then?");
    expect(await client.cancelSession(b.sessionId)).toMatchObject({ cancelled: true });

    const after: { customId: string | null; status: string; output: string | null }[] = [];
    for await (const line of client.batchResults(batch.id))
      after.push({ customId: line.customId, status: line.status, output: line.output });
    expect(after).toEqual([
      { customId: "a", status: "completed", output: "answer a" },
      { customId: "b", status: "cancelled", output: null },
    ]);
  }, 60_000);
});
