/**
 * A long session's usage, as a page of `GET /v1/sessions/:id` answers it: summed from the
 * session's usage mark and the steps after it (store/session-usage.ts), so paging through
 * 20,000 messages does not read every step once per page. Counted in index entries read
 * (Postgres's statistics), and checked equal to the sums over every step.
 */
import { describe, expect, it } from "vitest";
import { parseAgentConfig } from "../src/shared/agent-config.js";
import { openDatabase } from "../src/shared/db/client.js";
import { MARK_AFTER_STEPS, usageOfSession } from "../src/shared/store/session-usage.js";
import { queriesEnvForFile } from "./support/queries-env.js";
import { messageIndexReads } from "./support/stat-reads.js";
import { appendSteps as append, expectedUsage as expected, markOf as markIn } from "./support/usage-steps.js";

const AGENT = parseAgentConfig({ model: { provider: "scripted", steps: [{ text: "hi" }] } });

const env = queriesEnvForFile("session-usage-marks");

const appendSteps = (id: string, from: number, count: number) => append(env.fleet.database, id, from, count);
const messageReads = (fn: () => Promise<unknown>) => messageIndexReads(env.db, fn);
const markOf = (id: string) => markIn(env.fleet.database, id);

describe("a long session's usage", () => {
  it("reads the steps after its mark only, and equals the sums over every step", async () => {
    const { id } = await env.queries.createSession({ agent: AGENT });
    let last = await appendSteps(id, 0, 20_000);

    const first = await messageReads(async () =>
      expect(await env.queries.usageTotals(id)).toEqual(expected(last)),
    );
    expect(first.index).toBeGreaterThanOrEqual(10_000);
    expect(await markOf(id)).toBe(last);

    // The next page: nothing new, the mark and no step. Before marks: 20,000 entries again.
    const again = await messageReads(async () =>
      expect(await env.queries.usageTotals(id)).toEqual(expected(last)),
    );
    expect(again.index).toBeLessThan(10);

    // A few new steps are added to the mark without moving it (no write per read).
    last = await appendSteps(id, last, 20);
    const few = await messageReads(async () =>
      expect(await env.queries.usageTotals(id)).toEqual(expected(last)),
    );
    expect(few.index).toBeLessThan(40);
    expect(await markOf(id)).toBe(20_000);

    // Many new steps move it on.
    last = await appendSteps(id, last, 2 * MARK_AFTER_STEPS);
    expect(await env.queries.usageTotals(id)).toEqual(expected(last));
    expect(await markOf(id)).toBe(last);
  }, 60_000);

  it("keeps the mark furthest on when reads race, and drops it with its session", async () => {
    const { id } = await env.queries.createSession({ agent: AGENT });
    let last = await appendSteps(id, 0, 1_000);
    expect(await env.queries.usageTotals(id)).toEqual(expected(last));
    last = await appendSteps(id, last, 1_000);
    const others = Array.from({ length: 4 }, () => openDatabase(env.fleet.config.databaseUrl, { max: 1 }));
    try {
      const answers = await Promise.all(others.map((other) => usageOfSession(other, id)));
      for (const answer of answers) expect(answer).toEqual(expected(last));
    } finally {
      await Promise.all(others.map((other) => other.close()));
    }
    expect(await markOf(id)).toBe(last);

    await env.fleet.database.sql`delete from sessions where id = ${id}`;
    expect(await markOf(id)).toBeNull();
  }, 60_000);

  it("answers a session with no step, or none yet marked, with zeros", async () => {
    const { id } = await env.queries.createSession({ agent: AGENT });
    expect(await env.queries.usageTotals(id)).toEqual(expected(0));
    expect(await markOf(id)).toBeNull();
  });
});
