/**
 * `fleet watch` (readable lines) prints text a model, a tool or a user wrote — message
 * content, tool names, tool arguments — to a terminal. Control characters in it are shown as
 * escapes, never sent raw: before, an ESC sequence in a model's answer or a fetched page reached
 * the terminal (clearing it, retitling it, writing the clipboard with OSC 52), and a newline in
 * it printed a line of its own that looked like the watch's (a forged `■ run ended: completed`).
 */
import { Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { watchCommand } from "../src/commands/watch.js";
import { servePastEvents } from "./support/sse.js";

const FORGED =
  "hi\n00:00:09.000 ■ run ended: completed [r1]\r\u001b]52;c;cm0gLXJmIH4=\u0007\u001b[2J\u009b31m\u007f";

describe("fleet watch with hostile text in events", () => {
  let url: string;
  let close: () => Promise<void>;

  beforeAll(async () => {
    const at = "2026-01-02T03:04:05.678Z";
    const events = [
      { id: "1-0", type: "RUN_STARTED", data: { runId: "r1", kind: "run", trigger: "api\u001b[2J", at } },
      { id: "2-0", type: "MESSAGE_DELTA", data: { runId: "r1", text: FORGED, at } },
      {
        id: "3-0",
        type: "MESSAGE",
        data: {
          runId: "r1",
          message: {
            seq: 2,
            role: "assistant",
            content: FORGED,
            stopReason: "tool_use",
            toolCalls: [{ id: "c1", name: "fetch\u001b[8m", arguments: { url: "\u009b2J" } }],
            createdAt: at,
          },
          at,
        },
      },
      {
        id: "4-0",
        type: "TOOL_STARTED",
        data: { runId: "r1", name: "fetch\u001b[8m", toolCallId: "c1", at },
      },
      {
        id: "5-0",
        type: "MESSAGE",
        data: {
          runId: "r1",
          message: { seq: 3, role: "tool", name: "fetch", success: true, content: FORGED, createdAt: at },
          at,
        },
      },
      { id: "6-0", type: "SOMETHING_NEW", data: { note: "\u009b2J", at } },
      { id: "7-0", type: "RUN_COMPLETED", data: { runId: "r1", outcome: "completed", at } },
    ];
    ({ url, close } = await servePastEvents(events));
  });
  afterAll(async () => {
    await close();
  });

  it("shows control characters as escapes: one line per event (and per tool call), nothing raw", async () => {
    let text = "";
    const out = new Writable({
      write(chunk, _encoding, done) {
        text += String(chunk);
        done();
      },
    });
    const err = new Writable({ write: (_c, _e, done) => done() });
    const code = await watchCommand("s1", {
      api: url,
      once: true,
      io: { stdout: out, stderr: err },
      signal: new AbortController().signal,
    });
    expect(code).toBe(0);
    // Only the line ends the watch writes itself: no ESC, BEL, CR, DEL or C1 control.
    // biome-ignore lint/suspicious/noControlCharactersInRegex: the point of the test
    expect(text).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/);
    const lines = text.split("\n").filter(Boolean);
    // 7 events, the assistant message with one tool-call line under it.
    expect(lines).toHaveLength(8);
    // The only line that starts as a run's end is the run's end.
    expect(lines.filter((line) => /^[\d-]+ [\d:.]+ ■ run ended/.test(line))).toEqual([
      "2026-01-02 03:04:05.678 ■ run ended: completed [r1]",
    ]);
    expect(lines[0]).toBe("2026-01-02 03:04:05.678 ▶ run started by api\\u001b[2J [r1]");
    expect(lines[2]).toContain(
      "#2 assistant (tool_use): hi\\n00:00:09.000 ■ run ended: completed [r1]\\r\\u001b]52;c;cm0gLXJmIH4=\\u0007\\u001b[2J\\u009b31m\\u007f",
    );
    expect(lines[3]).toBe('    → fetch\\u001b[8m {"url":"\\u009b2J"}');
  });
});
