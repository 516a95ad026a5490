/**
 * An event id sent back in another spelling of the same stream id — leading zeros
 * (`0001700000000000-00`), which Redis reads as the same id — resumes after that event like
 * its own spelling. Before, the API took the place as found but compared it as text with
 * what it read: the event itself came a second time (a MESSAGE twice, against contracts §7).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EventWriter } from "../src/shared/event-writer.js";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { readSse } from "./support/sse.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

describe("resuming after an event id spelled with leading zeros", () => {
  let fleet: FleetEnv;
  let url: string;
  let key: string;

  beforeAll(async () => {
    fleet = await createFleetEnv("eventidforms");
    key = (await new ApiKeys(fleet.database).create("acme")).key;
    url = (await fleet.startApi()).api.url;
  }, 60_000);
  afterAll(() => fleet?.close());

  it("sends each event after it once, not the event itself again", async () => {
    const created = await fetch(`${url}/v1/sessions`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
      body: JSON.stringify({ agent: AGENT }),
    });
    const { id } = (await created.json()) as { id: string };
    const writer = new EventWriter(fleet.redis, fleet.config.prefix);
    await writer.write(
      id,
      [],
      [{ type: "RUN_STARTED", runId: "r1", kind: "run", resumeKind: null, trigger: "api" }],
    );
    await writer.write(id, [], [{ type: "MODEL_STOPPED", runId: "r1", stopReason: "max_tokens" }]);
    await writer.write(id, [], [{ type: "RUN_COMPLETED", runId: "r1", outcome: "completed" }]);
    const events = `${url}/v1/sessions/${id}/events`;
    const auth = { authorization: `Bearer ${key}` };
    const all = await readSse(events, {
      after: "0-0",
      headers: auth,
      stop: (e) => e.type === "RUN_COMPLETED",
    });
    expect(all.events.map((e) => e.type)).toEqual(["RUN_STARTED", "MODEL_STOPPED", "RUN_COMPLETED"]);
    const [ms, seq] = all.events[0]!.id.split("-") as [string, string];
    for (const spelled of [`000${ms}-${seq}`, `${ms}-0${seq}`]) {
      const read = await readSse(events, {
        after: spelled,
        headers: auth,
        stop: (e) => e.type === "RUN_COMPLETED",
      });
      expect(read.status).toBe(200);
      expect(read.events.map((e) => e.type)).toEqual(["MODEL_STOPPED", "RUN_COMPLETED"]);
    }
  });
});
