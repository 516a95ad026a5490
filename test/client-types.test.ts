/**
 * The client's types as a consumer of the package writes against them (checked by
 * `npm run typecheck`, strict): a run's `status` is one of its three values, so a misspelled
 * one does not compile; an event's `data` is typed by its `type` in a `case`; and the code
 * written against the earlier, looser types (`status: string`, `data: any`) still compiles,
 * also a `case` for an event type added after this client.
 */
import { describe, expectTypeOf, it } from "vitest";
import type { FleetClient, FleetEvent, RunJson, RunWithSession } from "../src/index.js";

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

  it("an event's data is typed by its type in a case, with a member for types added later", () => {
    const handle = (event: FleetEvent) => {
      switch (event.type) {
        case "MESSAGE":
          expectTypeOf(event.data.message.role).toEqualTypeOf<"user" | "assistant" | "tool" | "internal">();
          expectTypeOf(event.data.message.seq).toEqualTypeOf<number>();
          expectTypeOf(event.data.runId).toEqualTypeOf<string | null>();
          break;
        case "MESSAGE_DELTA":
          expectTypeOf(event.data.text).toEqualTypeOf<string>();
          break;
        case "TOOL_FINISHED":
          expectTypeOf(event.data.success).toEqualTypeOf<boolean>();
          // @ts-expect-error a tool's success is a boolean
          event.data.success satisfies string;
          break;
        case "RUN_COMPLETED":
          expectTypeOf(event.data.outcome).toEqualTypeOf<string>();
          break;
        case "BATCH_COMPLETED":
          expectTypeOf(event.data.counts.parked).toEqualTypeOf<number>();
          break;
      }
    };
    void handle;
    // One type's event, for a handler of its own.
    expectTypeOf<Extract<FleetEvent, { type: "SESSION_ENDED" }>["data"]["status"]>().toEqualTypeOf<
      "completed" | "parked" | "cancelled"
    >();
    expectTypeOf<Extract<FleetEvent, { type: "RUN_STARTED" }>["data"]["kind"]>().toEqualTypeOf<
      "run" | "resume"
    >();
  });
});
