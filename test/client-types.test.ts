/**
 * The client's types as a consumer of the package writes against them (checked by
 * `npm run typecheck`, strict): a run's `status` is one of its three values, so a misspelled
 * one does not compile; an event's `data` is typed by its `type` after `isEventType`; and the
 * code written against the earlier, looser types (`status: string`, `data` untyped) still
 * compiles: code that reads events, a `case` for an event type added after this client, and
 * code that builds events (a test's fake stream).
 */
import { describe, expect, expectTypeOf, it } from "vitest";
import {
  type FleetClient,
  type FleetEvent,
  isEventType,
  type KnownFleetEvent,
  type RunJson,
  type RunWithSession,
} from "../src/index.js";

/** Code written against the earlier types: it must go on compiling (never called). */
async function earlierCode(fleet: FleetClient, runId: string): Promise<string[]> {
  const lines: string[] = [];
  const run = await fleet.waitForRun(runId);
  const status: string = run.status;
  if (run.status === "ended" && run.endedReason === "completed") lines.push(status);
  for await (const event of fleet.events(run.sessionId)) {
    // Fields read without looking at the type, or from `data` taken before the switch.
    const data = event.data;
    const text: string = event.data.text;
    lines.push(text, String(data.outcome), String(event.data.message?.toolCallId));
    if (event.type === "MESSAGE" && event.data.message.toolCallId === "nap") lines.push("nap");
    switch (event.type) {
      case "MESSAGE_DELTA":
        lines.push(data.text);
        break;
      // A type this client does not know (added later): not a compile error.
      case "SOMETHING_NEW":
        lines.push(event.data.whatever);
        break;
      default:
        lines.push(event.type);
    }
  }
  return lines;
}

describe("the client's types", () => {
  it("code written against the earlier types compiles (above)", () => {
    expectTypeOf(earlierCode).returns.resolves.toEqualTypeOf<string[]>();
  });

  it("a run's status is queued, running or ended: a misspelled one is a compile error", () => {
    expectTypeOf<RunJson["status"]>().toEqualTypeOf<"queued" | "running" | "ended">();
    expectTypeOf<RunWithSession["kind"]>().toEqualTypeOf<"run" | "resume">();
    const misspelled = (run: RunWithSession) =>
      // @ts-expect-error a run's status is never "completed" (its endedReason is)
      run.status === "completed";
    void misspelled;
  });

  it("events built as before compile: a fake stream of a test, a type added later", () => {
    async function* fake(): AsyncGenerator<FleetEvent> {
      yield {
        id: "1-0",
        type: "MESSAGE",
        data: { type: "MESSAGE", message: { role: "user", content: "hi" } },
      };
      yield { id: "2-0", type: "RUN_COMPLETED", data: { type: "RUN_COMPLETED", outcome: "completed" } };
      yield {
        id: "3-0",
        type: "SOMETHING_NEW",
        data: { type: "SOMETHING_NEW", sessionId: "s1", whatever: 1 },
      };
    }
    const built: FleetEvent[] = [
      { id: "4-0", type: "MESSAGE_DELTA", data: { type: "MESSAGE_DELTA", text: "a" } },
    ];
    void fake;
    void built;
  });

  it("isEventType types an event's data by its type; Extract of KnownFleetEvent for a handler of one type", () => {
    const handle = (event: FleetEvent) => {
      if (isEventType(event, "MESSAGE")) {
        expectTypeOf(event.data.message.role).toEqualTypeOf<"user" | "assistant" | "tool" | "internal">();
        expectTypeOf(event.data.message.seq).toEqualTypeOf<number>();
        expectTypeOf(event.data.runId).toEqualTypeOf<string | null>();
      } else if (isEventType(event, "MESSAGE_DELTA")) {
        expectTypeOf(event.data.text).toEqualTypeOf<string>();
      } else if (isEventType(event, "TOOL_FINISHED")) {
        expectTypeOf(event.data.success).toEqualTypeOf<boolean>();
        // @ts-expect-error a tool's success is a boolean
        event.data.success satisfies string;
      } else if (isEventType(event, "RUN_COMPLETED")) {
        expectTypeOf(event.data.outcome).toEqualTypeOf<string>();
      } else if (isEventType(event, "BATCH_COMPLETED")) {
        expectTypeOf(event.data.counts.parked).toEqualTypeOf<number>();
      }
    };
    void handle;
    // @ts-expect-error a type this client does not know is no type to narrow to
    isEventType({ type: "X" }, "SOMETHING_NEW");
    expectTypeOf<Extract<KnownFleetEvent, { type: "SESSION_ENDED" }>["data"]["status"]>().toEqualTypeOf<
      "completed" | "parked" | "cancelled"
    >();
    expectTypeOf<Extract<KnownFleetEvent, { type: "RUN_STARTED" }>["data"]["kind"]>().toEqualTypeOf<
      "run" | "resume"
    >();
    // At run time a check of the type alone.
    expect(isEventType({ type: "MESSAGE" }, "MESSAGE")).toBe(true);
    expect(isEventType({ type: "MESSAGE_DELTA" }, "MESSAGE")).toBe(false);
  });
});
