/**
 * `fleet.events()` and its 410s against a fake API (test/support/fake-events-api.ts): a 410 for
 * the caller's own `after` rejects; one for its own reconnect re-reads from the run of the last
 * event it yielded (`?run=`), and from the latest run where the API refuses that; the caller's
 * own `run` starts the read at that run. (With a real fleet and Redis:
 * test/client-streams-redis-loss.test.ts.)
 */
import { describe, expect, it } from "vitest";
import { ApiTransport } from "../src/producer/api-transport.js";
import { FleetClient } from "../src/producer/client.js";
import { runEvents } from "../src/producer/client-event-streams.js";
import {
  alwaysGone,
  R1_END_AND_PARKING,
  R1_WRITTEN_ANEW_THEN_R2,
  sseEvent,
  startFakeEventsApi,
} from "./support/fake-events-api.js";

/**
 * The types of the events `events("s1")` yields against the fake API at `url`, up to a
 * RUN_COMPLETED; given `run`, each as `TYPE:RUN_ID`, up to that run's RUN_COMPLETED.
 */
async function typesToRunEnd(url: string, run?: string): Promise<string[]> {
  const client = new FleetClient({ baseUrl: url });
  const types: string[] = [];
  for await (const event of client.events("s1", { signal: AbortSignal.timeout(10_000) })) {
    types.push(run === undefined ? event.type : `${event.type}:${event.data.runId ?? ""}`);
    if (event.type === "RUN_COMPLETED" && (run === undefined || event.data.runId === run)) break;
  }
  return types;
}

describe("fleet.events() given an `after` whose place is gone", () => {
  it("rejects with the 410, without reading the stream again: the place was the caller's", async () => {
    const api = await startFakeEventsApi(alwaysGone("event 1-0 is older than the events kept"));
    try {
      const client = new FleetClient({ baseUrl: api.url });
      const read = async () => {
        for await (const _ of client.events("s1", { after: "1-0" })) {
          // nothing comes
        }
      };
      await expect(read()).rejects.toMatchObject({ status: 410 });
      expect(api.asked).toEqual(["1-0"]);
    } finally {
      await api.close();
    }
  });
});

describe("fleet.events() re-reading after a 410", () => {
  it("reads from the run it was in (`?run=`), and from the latest run where the API refuses that", async () => {
    const api = await startFakeEventsApi((last, url) => {
      if (last === "2-0") return { gone: "event 2-0 is older" };
      if (url.includes("?run=")) return { refused: "run" };
      return {
        events:
          last === undefined && api.asked.length === 1
            ? sseEvent("1-0", "RUN_STARTED", { kind: "run" }) +
              sseEvent("2-0", "TOOL_STARTED", { toolCallId: "nap", name: "sleep" })
            : sseEvent("1-0", "RUN_STARTED", { kind: "run" }) +
              sseEvent("2-0", "TOOL_STARTED", { toolCallId: "nap", name: "sleep" }) +
              sseEvent("3-0", "RUN_COMPLETED", { outcome: "completed" }),
      };
    });
    try {
      const types = await typesToRunEnd(api.url);
      expect(types).toEqual(["RUN_STARTED", "TOOL_STARTED", "RUN_COMPLETED"]);
      expect(api.urls).toEqual([
        "/v1/sessions/s1/events",
        "/v1/sessions/s1/events",
        "/v1/sessions/s1/events?run=r1",
        "/v1/sessions/s1/events",
      ]);
      expect(api.asked).toEqual([undefined, "2-0", undefined, undefined]);
    } finally {
      await api.close();
    }
  });

  it("the caller's own `run` starts the read at that run; refused, it rejects rather than read another run", async () => {
    const api = await startFakeEventsApi((_last, url) =>
      url.includes("?run=r9")
        ? { refused: "run" }
        : { events: sseEvent("1-0", "RUN_COMPLETED", { outcome: "completed" }) },
    );
    try {
      const client = new FleetClient({ baseUrl: api.url });
      for await (const event of client.events("s1", { run: "r1" })) {
        expect(event.type).toBe("RUN_COMPLETED");
        break;
      }
      const refused = (async () => {
        for await (const _ of client.events("s1", { run: "r9" })) {
          // nothing comes
        }
      })();
      await expect(refused).rejects.toMatchObject({ status: 400, field: "run" });
      expect(api.urls).toEqual(["/v1/sessions/s1/events?run=r1", "/v1/sessions/s1/events?run=r9"]);
    } finally {
      await api.close();
    }
  });

  it("a second 410 among a re-read's old messages re-reads from the run it had yielded, not theirs", async () => {
    const message = (id: string, runId: string, seq: number) =>
      sseEvent(id, "MESSAGE", { runId, message: { role: "user", content: "x", seq } });
    const api = await startFakeEventsApi((last, url) => {
      if (last === "11-0" || last === "20-0") return { gone: "older" };
      if (url.endsWith("?run=r2") && api.urls.length === 3) return { events: message("20-0", "r1", 1) };
      if (url.endsWith("?run=r2"))
        return { events: sseEvent("30-0", "RUN_COMPLETED", { runId: "r2", outcome: "completed" }) };
      if (url.endsWith("?run=r1"))
        return { events: sseEvent("40-0", "RUN_STARTED", { runId: "r1", kind: "run" }) };
      return {
        events: sseEvent("10-0", "RUN_STARTED", { runId: "r2", kind: "run" }) + message("11-0", "r2", 5),
      };
    });
    try {
      const client = new FleetClient({ baseUrl: api.url });
      const types: string[] = [];
      for await (const event of client.events("s1", { signal: AbortSignal.timeout(10_000) })) {
        types.push(`${event.type}:${event.data.runId}`);
        if (event.type === "RUN_COMPLETED") break;
      }
      expect(types).toEqual(["RUN_STARTED:r2", "MESSAGE:r2", "RUN_COMPLETED:r2"]);
      expect(api.urls.slice(2)).toEqual(Array(3).fill("/v1/sessions/s1/events?run=r2"));
      expect(api.asked).toEqual([undefined, "11-0", undefined, "20-0", undefined]);
    } finally {
      await api.close();
    }
  });
});

describe("fleet.stream()'s run re-read after a 410 from an API that refuses `?run=`", () => {
  it("rejects saying why when its run is no longer the latest, rather than wait for ever", async () => {
    // The API of the last release re-reads a session from its latest run only: r2 started
    // after r1, so r1's end is in no re-read.
    const api = await startFakeEventsApi((last, url) => {
      if (url.includes("?run=")) return { refused: "run" };
      if (last === "2-0") return { gone: "event 2-0 is older than the events kept" };
      if (last === undefined && api.urls.length === 2)
        return {
          events:
            sseEvent("1-0", "RUN_STARTED", { kind: "run" }) +
            sseEvent("2-0", "TOOL_STARTED", { toolCallId: "nap", name: "sleep" }),
        };
      if (last === undefined)
        return {
          events:
            sseEvent("7-0", "RUN_STARTED", { runId: "r2", kind: "run" }) +
            sseEvent("8-0", "TOOL_STARTED", { runId: "r2", toolCallId: "nap", name: "sleep" }),
        };
      return { events: "" };
    });
    try {
      const http = new ApiTransport({ baseUrl: api.url });
      const types: string[] = [];
      // What stream() and streamResume() yield once their POST is answered (run r1).
      const read = async () => {
        for await (const event of runEvents(http, "s1", "r1", AbortSignal.timeout(5_000)))
          types.push(event.type);
        return "ended without its run's end";
      };
      await expect(read()).rejects.toMatchObject({
        status: 410,
        message: expect.stringContaining("run r1 is no longer the session's latest (r2 is)"),
      });
      expect(types).toEqual(["RUN_STARTED", "TOOL_STARTED"]);
    } finally {
      await api.close();
    }
  });
});

describe("fleet.events()'s re-read of a parking written before its run's end", () => {
  it("yields the parking once", async () => {
    // The sweeper parks a session whose run's end it could not write (Redis failed that
    // write): SESSION_PARKED comes first, and the repair of the lost end (missingRunEnd) writes
    // RUN_COMPLETED after it. A SESSION_PARKED's data names no run.
    const parked = sseEvent("3-0", "SESSION_PARKED", { runId: undefined, reason: "attempts_exhausted" });
    const start =
      sseEvent("1-0", "RUN_STARTED", { kind: "run" }) +
      sseEvent("2-0", "MESSAGE", { message: { role: "user", content: "x", seq: 1 } });
    const api = await startFakeEventsApi((last, url) => {
      if (last === "3-0") return { gone: "event 3-0 is older than the events kept" };
      if (url.endsWith("?run=r1"))
        return { events: start + parked + sseEvent("4-0", "RUN_COMPLETED", { outcome: "crashed" }) };
      return { events: start + parked };
    });
    try {
      const types = await typesToRunEnd(api.url);
      expect(types).toEqual(["RUN_STARTED", "MESSAGE", "SESSION_PARKED", "RUN_COMPLETED"]);
      expect(api.urls).toEqual([
        "/v1/sessions/s1/events",
        "/v1/sessions/s1/events",
        "/v1/sessions/s1/events?run=r1",
      ]);
    } finally {
      await api.close();
    }
  });
});

describe("fleet.events()'s re-read by a reader that began after its run's messages", () => {
  it("yields nothing of a run whose end it yielded again, and reads on from the latest run", async () => {
    // The read began past r1's messages (the stream held no RUN_STARTED: it starts where it
    // stands), so the step knows no message seq.
    const api = await startFakeEventsApi((last) => {
      if (last === "4-0") return { gone: "event 4-0 is past the newest event of this stream" };
      if (last === undefined && api.asked.length === 1) return { events: R1_END_AND_PARKING };
      return { events: R1_WRITTEN_ANEW_THEN_R2 };
    });
    try {
      const types = await typesToRunEnd(api.url, "r2");
      // Before: MESSAGE:r1 twice more, r1's stored messages yielded as new.
      expect(types).toEqual([
        "RUN_COMPLETED:r1",
        "SESSION_PARKED:",
        "RUN_STARTED:r2",
        "MESSAGE:r2",
        "RUN_COMPLETED:r2",
      ]);
      // Its run had ended: read again from the latest run (r2's start, or the end), not r1's.
      expect(api.urls.at(-1)).toBe("/v1/sessions/s1/events");
    } finally {
      await api.close();
    }
  });
});

describe("fleet.events()'s re-read of a parking read before any event of its run", () => {
  it("knows the parking by the run its data names, and that run's events as read", async () => {
    // The read began after r1's end (a stream with no RUN_STARTED starts where it stands): its
    // first event is the parking, which (as this release's API writes it) names r1.
    const parked = (id: string) =>
      sseEvent(id, "SESSION_PARKED", { runId: "r1", reason: "attempts_exhausted" });
    const api = await startFakeEventsApi((last) => {
      if (last === "4-0") return { gone: "event 4-0 is past the newest event of this stream" };
      if (last === undefined && api.asked.length === 1) return { events: parked("4-0") };
      return {
        events:
          sseEvent("10-0", "RUN_STARTED", { kind: "run" }) +
          sseEvent("11-0", "MESSAGE", { message: { role: "user", content: "q", seq: 1 } }) +
          sseEvent("12-0", "RUN_COMPLETED", { outcome: "completed" }) +
          parked("13-0") +
          sseEvent("14-0", "RUN_STARTED", { runId: "r2", kind: "run" }) +
          sseEvent("15-0", "RUN_COMPLETED", { runId: "r2", outcome: "completed" }),
      };
    });
    try {
      const types = await typesToRunEnd(api.url, "r2");
      // Before: RUN_STARTED:r1, MESSAGE:r1 and the parking again. r1's end still passes: after
      // a parking the sweeper wrote before its run's lost end, that end is new.
      expect(types).toEqual(["SESSION_PARKED:r1", "RUN_COMPLETED:r1", "RUN_STARTED:r2", "RUN_COMPLETED:r2"]);
    } finally {
      await api.close();
    }
  });
});
