/**
 * The client's step through a stream it may read again after a 410 (src/producer/stream-reread.ts,
 * used by stream(), batchEvents(), events() and `fleet watch`), with no services: what a re-read
 * leaves out, what it passes, when the 410 it follows stands (a gap of messages) and which
 * errors it follows at all.
 */
import { describe, expect, it } from "vitest";
import type { FleetEvent } from "../src/producer/client.js";
import { FleetApiError } from "../src/producer/client-errors.js";
import { rereadStep } from "../src/producer/stream-reread.js";

const event = (type: string, data: Record<string, unknown> = {}): FleetEvent =>
  ({ id: "", type, data: { type, ...data } }) as FleetEvent;
const message = (seq: number) => event("MESSAGE", { runId: "r", message: { seq } });
const gone = () => new FleetApiError(410, "expired", "event 5-0 is older than the events kept");

/** A step's assistant message with one call `call_0` (a model that reuses ids: each step's), its result, its tool events. */
const assistant = (seq: number) =>
  event("MESSAGE", { runId: "r", message: { seq, role: "assistant", toolCalls: [{ id: "call_0" }] } });
const result = (seq: number) =>
  event("MESSAGE", { runId: "r", message: { seq, role: "tool", toolCallId: "call_0" } });
const started = event("TOOL_STARTED", { runId: "r", toolCallId: "call_0" });
const finished = event("TOOL_FINISHED", { runId: "r", toolCallId: "call_0" });

describe("rereadStep", () => {
  it("leaves out, read again, messages up to the last seq yielded and what it keys; passes live events", () => {
    const step = rereadStep();
    const first = [
      event("RUN_STARTED", { runId: "r" }),
      message(1),
      event("TOOL_STARTED", { runId: "r", toolCallId: "t" }),
      event("MESSAGE_DELTA", { runId: "r", text: "x" }),
      message(2),
      event("SESSION_ENDED", { sessionId: "s" }),
    ];
    expect(first.map((e) => step.pass(e))).toEqual([true, true, true, true, true, true]);
    const again = [
      ...first,
      message(3),
      event("TOOL_STARTED", { runId: "r", toolCallId: "u" }),
      event("TOOL_FINISHED", { runId: "r", toolCallId: "t" }),
      event("NEW_KIND"),
    ];
    expect(again.map((e) => step.pass(e))).toEqual([
      false,
      false,
      false,
      true,
      false,
      false,
      true,
      true,
      true,
      true,
    ]);
  });

  it("follows a 410, and nothing else", () => {
    const step = rereadStep();
    expect(step.follow(gone())).toBe(true);
    expect(step.follow(new FleetApiError(404, "not_found", "no session s1"))).toBe(false);
    expect(step.follow(new FleetApiError(503, "unavailable", "Redis away"))).toBe(false);
    expect(step.follow(new Error("socket hang up"))).toBe(false);
    // Each 410 of a later reconnect is followed too.
    expect(step.follow(gone())).toBe(true);
  });

  it("following a 410, a message past the one after the last yielded throws that 410, which is not followed again", () => {
    const step = rereadStep();
    step.pass(message(7));
    const error = gone();
    expect(step.follow(error)).toBe(true);
    expect([6, 7].map((seq) => step.pass(message(seq)))).toEqual([false, false]);
    expect(step.pass(event("TOOL_STARTED", { toolCallId: "t" }))).toBe(true);
    let thrown: unknown;
    try {
      step.pass(message(9));
    } catch (caught) {
      thrown = caught;
    }
    expect(thrown).toBe(error);
    expect(step.follow(thrown)).toBe(false);
  });

  it("a re-read's first new message ends the following: a later jump of seq is not a gap", () => {
    const step = rereadStep();
    step.pass(message(7));
    step.follow(gone());
    expect(step.pass(message(8))).toBe(true);
    // Not read after a 410 (e.g. a message stored while events were off): passed, as before.
    expect(step.pass(message(12))).toBe(true);
  });

  it("nothing yielded yet: a re-read's first message may have any seq", () => {
    const step = rereadStep();
    step.follow(gone());
    expect(step.pass(message(40))).toBe(true);
  });

  it("no gap is looked for before a 410 is followed", () => {
    const step = rereadStep();
    step.pass(message(1));
    expect(step.pass(message(5))).toBe(true);
  });

  it("keeps tool calls of different steps under one id apart, and leaves out each, read again, once", () => {
    const step = rereadStep();
    const run = [assistant(2), started, result(3), finished, assistant(4), started, result(5), finished];
    expect(run.map((e) => step.pass(e))).toEqual([true, true, true, true, true, true, true, true]);
    step.follow(gone());
    const again = [...run, assistant(6), started, result(7), finished];
    expect(again.map((e) => step.pass(e))).toEqual([...run.map(() => false), true, true, true, true]);
  });

  it("a call read first without its step (the read began after its assistant message) is left out, read again with it", () => {
    const step = rereadStep();
    // `fleet watch --after` an id between step 2's TOOL_STARTED and its result.
    for (const e of [result(3), finished, assistant(4), started, result(5), finished]) step.note(e);
    step.follow(gone());
    const again = [assistant(2), started, result(3), finished, assistant(4), started, result(5), finished];
    // The one event the reader had not had (before its --after) comes; nothing comes twice.
    expect(again.map((e) => step.pass(e))).toEqual([false, true, false, false, false, false, false, false]);
    expect([assistant(6), started, result(7), finished].map((e) => step.pass(e))).toEqual([
      true,
      true,
      true,
      true,
    ]);
  });

  it("forgets what it yielded of a run once the next run starts: a reader following a session for days holds one run's", () => {
    const step = rereadStep();
    let seq = 0;
    const run = (runId: string, calls: number) => {
      step.pass(event("RUN_STARTED", { runId }));
      for (let i = 0; i < calls; i++) {
        const id = `call_${runId}_${i}`;
        step.pass(
          event("MESSAGE", { runId, message: { seq: ++seq, role: "assistant", toolCalls: [{ id }] } }),
        );
        step.pass(event("TOOL_STARTED", { runId, toolCallId: id }));
        step.pass(event("MESSAGE", { runId, message: { seq: ++seq, role: "tool", toolCallId: id } }));
        step.pass(event("TOOL_FINISHED", { runId, toolCallId: id }));
      }
    };
    run("r1", 1_000);
    const afterOne = step.held();
    for (let r = 2; r <= 50; r++) run(`r${r}`, 1_000);
    expect(step.held()).toBe(afterOne);
    // The latest run's, read again after a 410 (the re-read starts at its RUN_STARTED), is still left out.
    step.follow(gone());
    expect(step.pass(event("RUN_STARTED", { runId: "r50" }))).toBe(false);
    expect(step.pass(event("TOOL_FINISHED", { runId: "r50", toolCallId: "call_r50_999" }))).toBe(false);
  });

  it("a run's start read again after the run's own events (a read begun within the run) forgets none of them", () => {
    const step = rereadStep();
    const tool = event("TOOL_STARTED", { runId: "r1", toolCallId: "nap" });
    step.note(tool);
    step.follow(gone());
    expect(step.pass(event("RUN_STARTED", { runId: "r1" }))).toBe(true);
    expect(step.pass(tool)).toBe(false);
  });

  it("leaves out a run's end read again, and passes the next run's", () => {
    const step = rereadStep();
    const end = (runId: string) => event("RUN_COMPLETED", { runId, outcome: "completed" });
    expect(step.pass(end("r1"))).toBe(true);
    step.follow(gone());
    expect([
      step.pass(end("r1")),
      step.pass(event("RUN_STARTED", { runId: "r2" })),
      step.pass(end("r2")),
    ]).toEqual([false, true, true]);
  });

  it("leaves out a parking read again after its run's end, passes each parking of a later run", () => {
    const step = rereadStep();
    const end = (runId: string) => event("RUN_COMPLETED", { runId, outcome: "max_turns" });
    const parked = event("SESSION_PARKED", { reason: "max_turns" });
    expect([step.pass(end("r1")), step.pass(parked)]).toEqual([true, true]);
    step.follow(gone());
    expect([step.pass(end("r1")), step.pass(parked)]).toEqual([false, false]);
    expect(
      [event("RUN_STARTED", { runId: "r2" }), end("r2"), parked, end("r2"), parked].map((e) => step.pass(e)),
    ).toEqual([true, true, true, false, false]);
    // No run's end read before it: nothing to know it by, passed.
    const fresh = rereadStep();
    expect([fresh.pass(parked), fresh.pass(parked)]).toEqual([true, true]);
  });

  it("note() marks events yielded without leaving any out", () => {
    const step = rereadStep();
    const tool = event("TOOL_STARTED", { toolCallId: "t" });
    step.note(tool);
    step.note(tool);
    step.note(message(3));
    step.follow(gone());
    expect([step.pass(tool), step.pass(message(3)), step.pass(message(4))]).toEqual([false, false, true]);
  });
});
