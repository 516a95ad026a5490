/**
 * `fleet watch` prints each event's own time: a MESSAGE's commit time, else when the event
 * entered the stream (`data.at`, which the API now sends, from the stream entry id). Before,
 * every line carried the time it was printed, so a backlog read at connect (the latest run's
 * events, or everything after `--after`) looked as if it had all just happened.
 */
import { Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { timeColumn, watchCommand } from "../src/commands/watch.js";
import { FleetClient, type FleetEvent } from "../src/producer/client.js";
import { EventWriter } from "../src/shared/event-writer.js";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { servePastEvents } from "./support/sse.js";

const sink = (lines: string[]) =>
  new Writable({
    write(chunk, _encoding, done) {
      lines.push(...String(chunk).split("\n").filter(Boolean));
      done();
    },
  });

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

describe("fleet watch against a stream of past events", () => {
  let url: string;
  let close: () => Promise<void>;
  const today = new Date().toISOString().slice(0, 10);

  beforeAll(async () => {
    const events = [
      {
        id: "1-0",
        type: "RUN_STARTED",
        data: { runId: "r1", kind: "run", trigger: "api", at: "2026-01-02T03:04:05.678Z" },
      },
      // Written into the stream again later (a rebuild): the commit time is the message's.
      {
        id: "2-0",
        type: "MESSAGE",
        data: {
          runId: "r1",
          message: { seq: 1, role: "user", content: "hi", createdAt: "2026-01-02T03:04:05.900Z" },
          at: `${today}T00:00:01.000Z`,
        },
      },
      // From an API older than `at`: no time is known.
      { id: "3-0", type: "TOOL_STARTED", data: { runId: "r1", name: "t", toolCallId: "c1" } },
      {
        id: "4-0",
        type: "RUN_COMPLETED",
        data: { runId: "r1", outcome: "completed", at: `${today}T00:00:02.500Z` },
      },
    ];
    ({ url, close } = await servePastEvents(events));
  });
  afterAll(async () => {
    await close();
  });

  it("prints each event's time, the date for another day's, dashes for none, never the print time", async () => {
    const out: string[] = [];
    const err: string[] = [];
    const code = await watchCommand("s1", {
      api: url,
      once: true,
      io: { stdout: sink(out), stderr: sink(err) },
      signal: new AbortController().signal,
    });
    expect(code).toBe(0);
    expect(err).toEqual([]);
    expect(out).toEqual([
      "2026-01-02 03:04:05.678 ▶ run started by api [r1]",
      "2026-01-02 03:04:05.900 #1 user: hi",
      "--:--:--.--- ⚙ t started (c1)",
      "00:00:02.500 ■ run ended: completed [r1]",
    ]);
  });

  it("shows the date when the event is of another day than now (UTC)", () => {
    const now = new Date("2026-03-04T00:00:00.100Z");
    expect(timeColumn("2026-03-04T00:00:00.050Z", now)).toBe("00:00:00.050");
    expect(timeColumn("2026-03-03T23:59:59.990Z", now)).toBe("2026-03-03 23:59:59.990");
    expect(timeColumn(null, now)).toBe("--:--:--.---");
  });
});

describe("the API sends each event's time", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let url: string;
  let key: string;

  beforeAll(async () => {
    fleet = await createFleetEnv("watchtimes");
    key = (await new ApiKeys(fleet.database).create("acme")).key;
    url = (await fleet.startApi()).api.url;
    client = new FleetClient({ baseUrl: url, apiKey: key });
  }, 60_000);
  afterAll(() => fleet?.close());

  it("as data.at, when the event entered the stream; fleet watch prints it", async () => {
    const { id } = await client.createSession({ agent: AGENT });
    const writer = new EventWriter(fleet.redis, fleet.config.prefix);
    const before = Date.now();
    await writer.write(
      id,
      [],
      [{ type: "RUN_STARTED", runId: "r1", kind: "run", resumeKind: null, trigger: "api" }],
    );
    await writer.write(id, [], [{ type: "RUN_COMPLETED", runId: "r1", outcome: "completed" }]);
    const after = Date.now();

    const seen: FleetEvent[] = [];
    for await (const event of client.events(id, { after: "0-0" })) {
      seen.push(event);
      if (event.type === "RUN_COMPLETED") break;
    }
    expect(seen.map((e) => e.type)).toEqual(["RUN_STARTED", "RUN_COMPLETED"]);
    for (const event of seen) {
      // The stream entry id's first part is the milliseconds Redis stamped it with.
      expect(event.data.at).toBe(new Date(Number(event.id.split("-")[0])).toISOString());
      const at = Date.parse(event.data.at ?? "");
      // Redis's clock is this machine's: the time is the write's, not the read's.
      expect(at).toBeGreaterThanOrEqual(before - 5);
      expect(at).toBeLessThanOrEqual(after + 5);
    }
    expect(Date.parse(seen[1]!.data.at!)).toBeGreaterThanOrEqual(Date.parse(seen[0]!.data.at!));

    const out: string[] = [];
    const code = await watchCommand(id, {
      api: url,
      apiKey: key,
      after: "0-0",
      once: true,
      io: { stdout: sink(out), stderr: sink([]) },
      signal: new AbortController().signal,
    });
    expect(code).toBe(0);
    expect(out).toEqual([
      `${timeColumn(seen[0]!.data.at!, new Date())} ▶ run started by api [r1]`,
      `${timeColumn(seen[1]!.data.at!, new Date())} ■ run ended: completed [r1]`,
    ]);
  }, 60_000);
});
