/**
 * A session's appends update its row in place (HOT: no index entry written) only when the new
 * version fits on the row's page. `sessions` keeps room on each page for it (migration 0019,
 * fillfactor 60): a batch's sessions are stored side by side, and with full pages an append
 * found no room beside its row, moved it to another page and wrote a new entry into every
 * index of `sessions` (six for a session mid-run). What is checked is what Postgres counted
 * (`pg_stat_user_tables`), not time.
 */
import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseAgentConfig } from "../src/shared/agent-config.js";
import { openDatabase } from "../src/shared/db/client.js";
import { FencedWrites } from "../src/shared/store/fenced-writes.js";
import { createSessions } from "../src/shared/store/session-creation.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { readsWhile } from "./support/stat-reads.js";

/** Sessions per batch (as `POST /v1/batches` stores them: one statement) and batches. */
const BATCH = 50;
const BATCHES = 4;
/** Sessions per grouped statement (a worker's turn). */
const GROUP = 16;

const AGENT = parseAgentConfig({ model: { provider: "scripted", steps: [{ text: "hi" }] } });

describe("session row updates", () => {
  let fleet: FleetEnv;
  let db: ReturnType<typeof openDatabase>;
  beforeAll(async () => {
    fleet = await createFleetEnv("hotupdates");
    // One connection: the statistics it reports are flushed before each reading.
    db = openDatabase(fleet.config.databaseUrl, { max: 1 });
  });
  afterAll(async () => {
    await db?.close();
    await fleet?.close();
  });

  /** Updates of `sessions`, and how many of them were HOT, while `fn` runs. */
  const updates = (fn: () => Promise<unknown>) =>
    readsWhile(
      db,
      async () => {
        const [row] = await db.sql<{ upd: string; hot: string }[]>`
          select n_tup_upd as upd, n_tup_hot_upd as hot from pg_stat_user_tables where relname = 'sessions'`;
        return { updated: Number(row!.upd), hot: Number(row!.hot) };
      },
      fn,
    );

  /** `fn` for every item, GROUP at a time in one turn (so each group is one grouped statement). */
  async function inGroups<T, R>(items: readonly T[], fn: (item: T) => Promise<R>): Promise<R[]> {
    const out: R[] = [];
    for (let i = 0; i < items.length; i += GROUP)
      out.push(...(await Promise.all(items.slice(i, i + GROUP).map(fn))));
    return out;
  }

  it("keeps room on each page of sessions", async () => {
    const [row] = await db.sql<{ options: string[] | null }[]>`
      select reloptions as options from pg_class where relname = 'sessions' and relkind = 'r'`;
    expect(row!.options).toContain("fillfactor=60");
  });

  it("a session's append right after its batch was stored is a HOT update", async () => {
    // Sessions with an imported history that ends in a user message (tail `awaiting_model`,
    // phase `open`): an append changes none of their indexed columns, as a mid-run append does.
    // The first update of a row after its insert needs no dead version pruned to find room,
    // so what it shows does not depend on when Postgres may prune (other transactions).
    const ids: string[] = [];
    for (let b = 0; b < BATCHES; b++) {
      const created = await createSessions(
        db,
        Array.from({ length: BATCH }, () => ({
          agent: AGENT,
          messages: [{ role: "user" as const, content: "Go." }],
        })),
        {},
        { id: randomUUID(), tenant: "default", create: true, open: false },
      );
      ids.push(...created.map((c) => c.id));
    }
    const writes = new FencedWrites(db, { groupWrites: true });
    const appended = await updates(() =>
      inGroups(ids, (id) =>
        writes.append(
          { sessionId: id, epoch: 0 },
          { lastSeq: 1, lastStepSeq: null },
          null,
          [
            {
              role: "assistant",
              content: "",
              toolCalls: [{ id: "c1", name: "read_file", arguments: { path: "a.txt" } }],
              stopReason: "tool_use",
            },
          ],
          "tools_pending",
        ),
      ),
    );
    expect(appended.updated).toBe(BATCH * BATCHES);
    // Here 160 of 200 rows found room for their next version beside them (their pages were
    // filled to 60 %); with full pages, 0 to 52 in three runs.
    expect(appended.hot / appended.updated).toBeGreaterThan(0.5);
  });
});
