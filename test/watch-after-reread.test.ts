/**
 * `fleet watch --after ID` where ID is past a run's messages (its last message, a tool's end):
 * the watch prints the run's end, then its reconnect is answered 410 (the stream written anew:
 * Redis lost its data) and it reads the stream again. It knew no message seq of that run, and
 * the stream written anew holds the run's stored messages again: they were printed as new, and
 * the re-read began at that ended run (`?run=`). Now nothing of a run whose end was printed is
 * printed again, and the re-read starts at the latest run. A fake API plays the stream
 * (test/support/fake-events-api.ts).
 */
import { Writable } from "node:stream";
import { expect, it } from "vitest";
import { watchCommand } from "../src/commands/watch.js";
import {
  R1_END_AND_PARKING,
  R1_WRITTEN_ANEW_THEN_R2,
  startFakeEventsApi,
} from "./support/fake-events-api.js";
import { waitFor } from "./support/fleet-env.js";

it("prints nothing of the ended run again after a 410, and reads on from the latest run", async () => {
  const api = await startFakeEventsApi((last) => {
    if (last === "2-0") return { events: R1_END_AND_PARKING };
    if (last === "4-0") return { gone: "event 4-0 is past the newest event of this stream" };
    return { events: last === undefined ? R1_WRITTEN_ANEW_THEN_R2 : "" };
  });
  const lines: { type: string; data: { runId?: string } }[] = [];
  const stdout = new Writable({
    write(chunk, _encoding, done) {
      for (const line of String(chunk).split("\n").filter(Boolean)) lines.push(JSON.parse(line));
      done();
    },
  });
  const controller = new AbortController();
  try {
    const watched = watchCommand("s1", {
      api: api.url,
      after: "2-0",
      json: true,
      io: { stdout, stderr: new Writable({ write: (_c, _e, done) => done() }) },
      signal: controller.signal,
    });
    await waitFor(
      () => lines.some((line) => line.type === "RUN_COMPLETED" && line.data.runId === "r2"),
      10_000,
      "r2's end",
    );
    controller.abort();
    await watched;
    // Before: MESSAGE:r1 twice more after the parking (r1's stored messages printed as new).
    expect(lines.map((line) => `${line.type}:${line.data.runId ?? ""}`)).toEqual([
      "RUN_COMPLETED:r1",
      "SESSION_PARKED:",
      "RUN_STARTED:r2",
      "MESSAGE:r2",
      "RUN_COMPLETED:r2",
    ]);
    expect(api.urls[2]).toBe("/v1/sessions/s1/events");
  } finally {
    controller.abort();
    await api.close();
  }
}, 30_000);
