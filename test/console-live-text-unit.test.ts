/**
 * What the console shows as streaming text after each event (console/src/live-text.ts, pure):
 * the text of the model call streaming now, and only that. The browser test is
 * console-live-text.test.ts.
 */
import { describe, expect, it } from "vitest";
import { type LiveEvent, type LiveText, liveTextAfter, NO_LIVE_TEXT } from "../console/src/live-text.js";

let n = 0;
const event = (type: string, data: Record<string, unknown>): LiveEvent & { id: string } => ({
  id: `${++n}-0`,
  type,
  data,
});
const started = (runId: string) => event("RUN_STARTED", { runId, kind: "run" });
const delta = (runId: string, text: string) => event("MESSAGE_DELTA", { runId, text });
const assistant = (runId: string, content: string) =>
  event("MESSAGE", { runId, message: { role: "assistant", content, seq: 2 } });
const completed = (runId: string) => event("RUN_COMPLETED", { runId, outcome: "completed" });

function shown(events: (LiveEvent | { type: "reset" })[], from: LiveText = NO_LIVE_TEXT): string[] {
  const texts: string[] = [];
  let state = from;
  for (const e of events) {
    state = liveTextAfter(state, e);
    texts.push(state.text);
  }
  return texts;
}

describe("the console's streaming text", () => {
  it("is a step's deltas, ended by its MESSAGE and its run's end", () => {
    expect(
      shown([started("a"), delta("a", "Hel"), delta("a", "lo"), assistant("a", "Hello"), completed("a")]),
    ).toEqual(["", "Hel", "Hello", "", ""]);
  });

  it("starts again at a RUN_STARTED: a stream read again from the run's start (after a 410)", () => {
    expect(
      shown([started("a"), delta("a", "Hello w"), started("a"), delta("a", "Hello w"), delta("a", "orld")]),
    ).toEqual(["", "Hello w", "", "Hello w", "Hello world"]);
    // A 410 (reset) clears it; a run's deltas after it are shown alone, its RUN_STARTED trimmed.
    expect(shown([started("a"), delta("a", "Hello w"), { type: "reset" }, delta("a", "orld")])).toEqual([
      "",
      "Hello w",
      "",
      "orld",
    ]);
  });

  it("a cut stream's retry (a resume) shows only the retry's text", () => {
    expect(
      shown([
        started("a"),
        delta("a", "Hello w"),
        assistant("a", "Hello w"),
        completed("a"),
        started("b"),
        delta("b", "Hello"),
        delta("b", " world"),
      ]),
    ).toEqual(["", "Hello w", "", "", "", "Hello", "Hello world"]);
    // The run's deltas without its start and end (a stream that lost them): a delta of another
    // run replaces the text of the one before.
    expect(shown([delta("a", "Hello w"), delta("b", "Hello")])).toEqual(["Hello w", "Hello"]);
  });

  it("leaves out a delta of a run that has ended (a worker frozen past its lease, woken during the resume)", () => {
    expect(
      shown([
        started("a"),
        delta("a", "Hello w"),
        completed("a"),
        started("b"),
        delta("b", "Hello"),
        delta("a", "orld and more"),
        delta("b", " world"),
        // Another run's end keeps the text of the run streaming.
        completed("a"),
      ]),
    ).toEqual(["", "Hello w", "", "", "Hello", "Hello", "Hello world", "Hello world"]);
  });

  it("remembers a bounded number of ended runs", () => {
    let state = NO_LIVE_TEXT;
    for (let i = 0; i < 100; i++) state = liveTextAfter(state, completed(`r${i}`));
    expect(state.ended.length).toBeLessThanOrEqual(16);
    expect(state.ended).toContain("r99");
  });
});
