import { describe, expect, it } from "vitest";
import { ValidationError } from "../src/shared/errors.js";
import { parseRunJob, runJobSchema } from "../src/shared/queues.js";

// parseRunJob reads a well-formed job's data without zod: it must answer exactly what the
// schema does, and leave every other shape to the schema's error.
describe("parseRunJob", () => {
  it("answers what runJobSchema answers for well-formed data, other fields dropped", () => {
    for (const data of [
      { sessionId: "s1", runId: "r1" },
      { runId: "r2", sessionId: "s2", newerField: { x: 1 } },
      { sessionId: "\u00e9\ud83d\ude00", runId: "r" },
    ]) {
      const { payload } = parseRunJob("run", data);
      expect(payload).toEqual(runJobSchema.parse(data));
      expect(Object.keys(payload)).toEqual(["sessionId", "runId"]);
    }
  });

  it("refuses what runJobSchema refuses, with its field errors", () => {
    for (const data of [
      null,
      "s1",
      [],
      {},
      { sessionId: "s1" },
      { sessionId: "", runId: "r1" },
      { sessionId: "s1", runId: 7 },
      { sessionId: "s\u0000", runId: "r1" },
      { sessionId: "s1", runId: "r\ud800" },
    ]) {
      expect(runJobSchema.safeParse(data).success).toBe(false);
      expect(() => parseRunJob("resume", data)).toThrow(ValidationError);
      expect(() => parseRunJob("resume", data)).toThrow(/job\.data/);
    }
  });
});
