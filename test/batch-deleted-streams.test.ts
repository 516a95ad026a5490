/**
 * Event streams open while a batch is deleted end: the batch's own and its sessions', whether
 * the delete ran whole (its sessions purged, the batch's row gone) or only its mark committed
 * (the API stopped or ran out of time: the sweeper purges the rest later). From the mark on
 * the batch and its sessions answer 404, and a reader is not held on a stream of what is gone;
 * the batch's stream ends with BATCH_DELETED either way, and a session's with SESSION_DELETED:
 * marked only, it ended silently, and `fleet.events()` reconnected into a 404 (FleetApiError).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { EventWriter } from "../src/shared/event-writer.js";
import { eventStreamKey, seqKey } from "../src/shared/events.js";
import { DataDeletion } from "../src/shared/store/data-deletion.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

describe("event streams open while their batch is deleted", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let base: string;

  beforeAll(async () => {
    fleet = await createFleetEnv("batchdeletedstreams", { env: { FLEET_SSE_HEARTBEAT_MS: "300" } });
    let api: { url: string };
    ({ client, api } = await fleet.startApi());
    base = api.url;
  }, 60_000);
  afterAll(() => fleet?.close());

  /** Opens the stream at `path`; `read()` gives its text once it ended, or "(still open)" after 20 s. */
  async function open(path: string) {
    const controller = new AbortController();
    const response = await fetch(`${base}${path}`, { signal: controller.signal });
    expect(response.status).toBe(200);
    const reader = response.body!.getReader();
    const decoder = new TextDecoder();
    let text = "";
    let ended = false;
    const done = (async () => {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        text += decoder.decode(value, { stream: true });
      }
      ended = true;
    })().catch(() => {});
    // The stream has started (its first comment line is sent as it opens).
    for (let i = 0; i < 100 && !text.includes(": events"); i++) await new Promise((r) => setTimeout(r, 50));
    return {
      read: async () => {
        const timer = setTimeout(() => controller.abort(), 20_000);
        await done;
        clearTimeout(timer);
        return ended ? "ended" : "(still open)";
      },
      text: () => text,
    };
  }

  async function batchOfTwo() {
    // No worker runs: the sessions' runs stay queued, so their streams have nothing to end them.
    return client.createBatch([
      { agent: AGENT, input: "one" },
      { agent: AGENT, input: "two" },
    ]);
  }

  it("deleted whole: the batch's stream and its sessions' end", async () => {
    const batch = await batchOfTwo();
    const batchStream = await open(`/v1/batches/${batch.id}/events`);
    const sessionStream = await open(`/v1/sessions/${batch.sessions[0]!.id}/events`);
    expect(await client.deleteBatch(batch.id)).toMatchObject({ complete: true });
    expect([await batchStream.read(), await sessionStream.read()]).toEqual(["ended", "ended"]);
    expect(batchStream.text()).toContain("BATCH_DELETED");
    expect(sessionStream.text()).toContain("SESSION_DELETED");
  }, 60_000);

  it("only marked deleted: the batch's stream and its sessions' end too", async () => {
    const batch = await batchOfTwo();
    const batchStream = await open(`/v1/batches/${batch.id}/events`);
    const sessionStream = await open(`/v1/sessions/${batch.sessions[0]!.id}/events`);
    expect(await new DataDeletion(fleet.database).markBatchDeleted("default", batch.id)).not.toBeNull();
    expect([await batchStream.read(), await sessionStream.read()]).toEqual(["ended", "ended"]);
    // The batch's reader is told why (its client stops there rather than reconnect into a 404).
    expect(batchStream.text()).toContain("BATCH_DELETED");
    // So is the session's: its stream ends with SESSION_DELETED, not silently.
    expect(sessionStream.text()).toContain("event: SESSION_DELETED");
  }, 60_000);

  it("only marked deleted: a client following a session's events gets SESSION_DELETED and returns", async () => {
    const batch = await batchOfTwo();
    const sessionId = batch.sessions[1]!.id;
    const seen: string[] = [];
    const following = (async () => {
      for await (const event of client.events(sessionId)) seen.push(event.type);
    })();
    // Following (its stream open) before the mark.
    const streams = async () => {
      const text = await (await fetch(`${base}/metrics`)).text();
      return Number(/^fleet_sse_clients(?:\{[^}]*\})? (\d+)/m.exec(text)?.[1] ?? 0);
    };
    await waitFor(async () => (await streams()) >= 1, 10_000, "the stream open");
    expect(await new DataDeletion(fleet.database).markBatchDeleted("default", batch.id)).not.toBeNull();
    await following;
    expect(seen).toEqual(["SESSION_DELETED"]);
    // A late worker's write finds the tombstone: nothing recreates the stream's bookkeeping.
    expect(await fleet.redis.hget(seqKey(fleet.config.prefix, sessionId), "deleted")).toBe("1");
  }, 60_000);

  it("only marked deleted: the queued runs the mark ended get no late RUN_COMPLETED, nor a stream", async () => {
    // A reader's look at a stream (at each heartbeat, before it asks whether its session is
    // still there) writes a lost run end: the mark's ended runs are not lost ends, they went
    // with their session, whose last event is SESSION_DELETED (as a deleted session's queued runs).
    const batch = await batchOfTwo();
    const sessionId = batch.sessions[0]!.id;
    expect(await new DataDeletion(fleet.database).markBatchDeleted("default", batch.id)).not.toBeNull();
    await fleet.database
      .sql`update runs set ended_at = now() - interval '1 minute' where session_id = ${sessionId}`;
    const writer = new EventWriter(fleet.redis, fleet.config.prefix);
    expect(await writer.missingRunEnd(fleet.database, sessionId, 0)).toBeNull();
    expect(await fleet.redis.exists(eventStreamKey(fleet.config.prefix, sessionId))).toBe(0);
  }, 60_000);

  it("only marked deleted: its session's reader gets one SESSION_DELETED", async () => {
    const batch = await batchOfTwo();
    const sessionStream = await open(`/v1/sessions/${batch.sessions[0]!.id}/events`);
    expect(await new DataDeletion(fleet.database).markBatchDeleted("default", batch.id)).not.toBeNull();
    expect(await sessionStream.read()).toBe("ended");
    expect(sessionStream.text().match(/event: SESSION_DELETED/g)).toHaveLength(1);
  }, 60_000);
});
