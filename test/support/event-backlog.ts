/**
 * A backlog of big events in a session's stream, written as a fleet's workers write them: what
 * a reader that reads slowly, or not at all, cannot take (events-stalled-reader,
 * stream-key-revoked).
 */
import { expect } from "vitest";
import { EventWriter } from "../../src/shared/event-writer.js";
import type { FleetEnv } from "./fleet-env.js";
import { bigToolResult } from "./histories.js";

/** Writes `events` stored `read_file` results (bigToolResult) of run `r1`, in pages of 100. */
export async function writeBigBacklog(
  fleet: FleetEnv,
  sessionId: string,
  events: number,
  maxBytes: number,
): Promise<void> {
  const writer = new EventWriter(fleet.redis, fleet.config.prefix, {
    maxEvents: 10_000,
    maxAgeMs: 3_600_000,
    maxBytes,
  });
  for (let seq = 1; seq <= events; seq += 100) {
    const page = Array.from({ length: 100 }, (_, i) => ({ runId: "r1", message: bigToolResult(seq + i) }));
    expect((await writer.write(sessionId, page, [])).ok).toBe(true);
  }
}
