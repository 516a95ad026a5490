/**
 * The bound on what a session's history holds (README "Limits that always hold": an imported
 * history holds at most about 32 MiB, MAX_HISTORY_BYTES, since every reader of the session —
 * a whole GET, the worker's run, the event stream — holds all of it) applies to new messages
 * too. Before, it bounded imports only: `POST …/messages` of 1,000,000 characters each grew a
 * session without end (60 of them: a 60 MB history, and the worker that ran it at 470 MB peak
 * RSS, growing ~6 MB per message), which an imported session of the same size was refused.
 *
 * A message that would bring the stored history, with the input of the session's runs still
 * queued, past the bound is refused `409` (`reason: "history_full"`), nothing queued; a
 * smaller one that fits is still taken. The API alone (no worker): queued runs hold their
 * input until a worker takes it, and they count.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { MAX_HISTORY_BYTES } from "../src/producer/request-limits.js";
import type { Message } from "../src/shared/messages.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };
const MESSAGE = 1_000_000;

describe("a session's history bound holds for new messages", () => {
  let fleet: FleetEnv;
  let client: FleetClient;

  beforeAll(async () => {
    fleet = await createFleetEnv("historymessages");
    client = (await fleet.startApi()).client;
  }, 60_000);
  afterAll(async () => fleet?.close());

  /** Imports a history of `bytes` bytes (user texts of up to 1 MB, each answered "ok"), in pages. */
  async function importedSession(bytes: number): Promise<string> {
    const messages: Message[] = [];
    for (let left = bytes; left > 0; ) {
      const text = Math.min(MESSAGE, left - 2);
      messages.push(
        { role: "user", content: "x".repeat(text) },
        { role: "assistant", content: "ok", stopReason: "end_turn" },
      );
      left -= text + 2;
    }
    const pageOf = 20; // 10 MB a request, under the 16 MB body bound
    const { id } = await client.createSession({ agent: AGENT, messages: messages.slice(0, pageOf) });
    for (let at = pageOf; at < messages.length; at += pageOf)
      await client.importMessages(id, messages.slice(at, at + pageOf), { afterSeq: at });
    return id;
  }

  it("refuses a message past the bound (409 history_full, nothing queued); one that fits is taken", async () => {
    const held = MAX_HISTORY_BYTES - 1_500_000;
    const id = await importedSession(held);
    const [row] = await fleet.database.sql<{ b: string }[]>`
      select history_bytes::text as b from sessions where id = ${id}`;
    expect(Number(row!.b)).toBe(held);

    // Fits: held + 1 MB.
    const first = await client.send(id, "y".repeat(MESSAGE));
    // Held + the queued 1 MB + 1 MB more would pass the bound.
    await expect(client.send(id, "z".repeat(MESSAGE))).rejects.toMatchObject({
      status: 409,
      reason: "history_full",
      message: expect.stringContaining("32 MiB"),
    });
    const runs = await fleet.database.sql<{ id: string }[]>`select id from runs where session_id = ${id}`;
    expect(runs.map((r) => r.id)).toEqual([first.runId]);
    // A message that still fits is taken.
    const small = await client.send(id, "short");
    expect(small.runId).toEqual(expect.any(String));
  }, 120_000);
});
