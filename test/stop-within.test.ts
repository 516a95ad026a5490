import { describe, expect, it } from "vitest";
import { stopWithin } from "../src/commands/serve.js";

describe("stopWithin", () => {
  it("resolves 0 when the stop ends in time", async () => {
    await expect(stopWithin("sweeper", async () => {}, 1_000)).resolves.toBe(0);
  });

  it("gives up after its time with one line that does not only blame an unreachable store", async () => {
    // A sweeper stuck in a long statement (a bad plan) is not waiting on an unreachable Postgres.
    await expect(stopWithin("sweeper", () => new Promise<void>(() => {}), 20)).rejects.toThrow(
      "sweeper not stopped 0 s after the signal (waiting on Redis or Postgres: unreachable, or a statement still running there); exiting anyway",
    );
  });
});
