/**
 * A new batch stored in one statement (session-creation.ts): its row, its sessions and their
 * first runs, without a transaction around them when no tenant limit needs holding; a tenant
 * limit and an append to an open batch keep theirs. Counted on the wire (postgres.js's debug
 * hook), against a real Postgres.
 */
import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseAgentConfig } from "../src/shared/agent-config.js";
import { ValidationError } from "../src/shared/errors.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { countedDatabase } from "./support/counted-statements.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const AGENT = parseAgentConfig({ model: { provider: "scripted", steps: [{ text: "hi" }] } });

let fleet: FleetEnv;
let counted: ReturnType<typeof countedDatabase>;
let queries: SessionQueries;
beforeAll(async () => {
  fleet = await createFleetEnv("batch-statements");
  counted = countedDatabase(fleet.config.databaseUrl);
  queries = new SessionQueries(counted.database);
});
afterAll(async () => {
  await counted?.database.close();
  await fleet?.close();
});

/** The statements `fn` sent. */
async function sent(fn: () => Promise<unknown>): Promise<string[]> {
  counted.statements.length = 0;
  await fn();
  return [...counted.statements];
}

const batchOf = (id: string, sessionEvents?: boolean) => ({
  id,
  tenant: "default",
  create: true,
  open: false,
  webhookUrl: null,
  sessionEvents,
});

async function stored(batchId: string) {
  const { sql } = fleet.database;
  const [batch] = await sql<{ session_events: boolean; open: boolean }[]>`
    select session_events, open from batches where id = ${batchId}`;
  const sessions = await sql<{ custom_id: string; session_events: boolean; runs: number }[]>`
    select s.custom_id, s.session_events, (select count(*)::int from runs r where r.session_id = s.id) as runs
      from sessions s where s.batch_id = ${batchId} order by s.custom_id`;
  return { batch, sessions };
}

describe("a new batch", () => {
  it("goes in one statement with its sessions and runs, each session taking the batch's stream setting", async () => {
    const on = randomUUID();
    const statements = await sent(() =>
      queries.createSessions(
        [
          { agent: AGENT, input: "go", customId: "a" },
          { agent: AGENT, customId: "b", sessionEvents: false },
          { agent: AGENT, input: "go", customId: "c", sessionEvents: true },
        ],
        {},
        batchOf(on),
      ),
    );
    // Before: begin, the batch, its sessions, commit.
    expect(statements).toHaveLength(1);
    expect(statements[0]).toMatch(/^with nb as \(insert into batches/);
    expect(await stored(on)).toEqual({
      batch: { session_events: true, open: false },
      sessions: [
        { custom_id: "a", session_events: true, runs: 1 },
        { custom_id: "b", session_events: false, runs: 0 },
        { custom_id: "c", session_events: true, runs: 1 },
      ],
    });

    const off = randomUUID();
    expect(
      await sent(() =>
        queries.createSessions([{ agent: AGENT, input: "go", customId: "a" }], {}, batchOf(off, false)),
      ),
    ).toHaveLength(1);
    expect(await stored(off)).toEqual({
      batch: { session_events: false, open: false },
      sessions: [{ custom_id: "a", session_events: false, runs: 1 }],
    });
  });

  it("without streams refuses a session that asks for one, storing nothing", async () => {
    const id = randomUUID();
    const error = await queries
      .createSessions(
        [
          { agent: AGENT, input: "go", customId: "a" },
          { agent: AGENT, input: "go", customId: "b", sessionEvents: true },
        ],
        {},
        batchOf(id, false),
      )
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ValidationError);
    expect((error as ValidationError).field).toBe("sessions[1].sessionEvents");
    expect(await stored(id)).toEqual({ batch: undefined, sessions: [] });
  });

  it("under a tenant's active-session limit is still held in a transaction, and an append locks the batch first", async () => {
    const id = randomUUID();
    const limited = await sent(() =>
      queries.createSessions(
        [{ agent: AGENT, input: "go", customId: "a" }],
        { maxActiveSessions: 1_000 },
        {
          ...batchOf(id),
          open: true,
        },
      ),
    );
    expect(limited[0]).toMatch(/^begin/i);
    expect(limited.at(-1)).toMatch(/^commit/i);
    const appended = await sent(() =>
      queries.createSessions(
        [{ agent: AGENT, input: "go", customId: "b" }],
        {},
        {
          id,
          tenant: "default",
          create: false,
          open: false,
        },
      ),
    );
    expect(appended[0]).toMatch(/^begin/i);
    expect(appended[1]).toMatch(/for update$/);
    expect(await stored(id)).toEqual({
      batch: { session_events: true, open: false },
      sessions: [
        { custom_id: "a", session_events: true, runs: 1 },
        { custom_id: "b", session_events: true, runs: 1 },
      ],
    });
  });
});
