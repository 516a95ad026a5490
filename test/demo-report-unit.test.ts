/**
 * The `fleet demo` report's line on its shared log (demo-report.ts, pure): a session whose
 * line is missing (its append_file answered as interrupted by the kill, never run again, or
 * a line another run's sessions disturbed) makes the demo exit 1, and the report says so.
 * Before, it said "every session's log line was written exactly once" above an exit 1, the
 * one line that explained the failure saying the opposite.
 */
import { describe, expect, it } from "vitest";
import { type DemoReport, formatReport } from "../src/commands/demo-report.js";

const report: DemoReport = {
  sessions: 3,
  completed: 3,
  stopped: 0,
  insideTool: 0,
  messages: 21,
  toolCalls: 9,
  interruptedToolCalls: 1,
  toolCallsAnsweredTwice: 0,
  runsByOutcome: { completed: 3 },
  resumesByKind: {},
  resumeStartedAt: [],
  resumes: 0,
};

const appendLine = (appends: number[]) =>
  formatReport(report, 1_000, "/tmp/x", null, appends)
    .split("\n")
    .find((line) => line.startsWith("append_file"));

describe("the demo report's append_file line", () => {
  it("says every line was written once only when each was", () => {
    expect(appendLine([1, 1, 1])).toBe(
      "append_file twice   0 sessions (every session's log line was written exactly once)",
    );
  });

  it("names the sessions whose line is missing", () => {
    expect(appendLine([1, 0, 1])).toBe(
      "append_file twice   0 sessions; 1 session's log line MISSING (never written)",
    );
    expect(appendLine([2, 0, 0])).toBe(
      "append_file twice   1 sessions (a log line written MORE THAN ONCE); 2 sessions' log line MISSING (never written)",
    );
  });
});
