/**
 * The "run started" / "run ended" fields (run-state.ts): `workerId` only when the logger does
 * not bind it already, with the logger's bindings read once per logger — pino's `bindings()`
 * parses its JSON on each call, which was once per run.
 */
import pino from "pino";
import { describe, expect, it } from "vitest";
import type { RunRow } from "../src/shared/db/schema.js";
import type { SessionJobDeps } from "../src/worker/job-deps.js";
import { runLogFields } from "../src/worker/run-state.js";

const run = (id: string) => ({ id, sessionId: "s-1" }) as RunRow;

/** A pino logger whose `bindings()` calls are counted. */
function countedLogger(base: Record<string, unknown>) {
  const log = pino({ level: "silent", base });
  const calls = { bindings: 0 };
  const bindings = log.bindings.bind(log);
  log.bindings = () => {
    calls.bindings++;
    return bindings();
  };
  return { log, calls };
}

describe("runLogFields", () => {
  it("leaves out the workerId the logger binds, reading its bindings once for many runs", () => {
    const { log, calls } = countedLogger({ role: "worker", workerId: "w-1" });
    const deps = { log, workerId: "w-1" } as unknown as SessionJobDeps;
    for (const id of ["r-1", "r-2", "r-3"])
      expect(runLogFields(run(id), "run", deps)).toEqual({ sessionId: "s-1", runId: id, kind: "run" });
    expect(calls.bindings).toBe(1);
  });

  it("adds workerId when the logger binds none, or another one", () => {
    const none = countedLogger({ role: "worker" });
    const other = countedLogger({ workerId: "w-2" });
    for (const { log, calls } of [none, other]) {
      const deps = { log, workerId: "w-1" } as unknown as SessionJobDeps;
      expect(runLogFields(run("r-1"), "resume", deps)).toEqual({
        sessionId: "s-1",
        runId: "r-1",
        workerId: "w-1",
        kind: "resume",
      });
      runLogFields(run("r-2"), "run", deps);
      expect(calls.bindings).toBe(1);
    }
  });

  it("adds workerId for a logger without bindings (a plain object)", () => {
    const log = { info() {}, warn() {}, error() {}, debug() {} };
    const deps = { log, workerId: "w-1" } as unknown as SessionJobDeps;
    expect(runLogFields(run("r-1"), "run", deps)).toMatchObject({ workerId: "w-1" });
  });
});
