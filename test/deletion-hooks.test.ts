/**
 * The onSessionDeleted outbox against real Postgres (no worker: the test is the worker):
 * every delete (API, batch, retention) writes its sessions' rows in its own statement; a
 * claim hides them from other workers until it runs out, then they are taken again (the
 * worker died: at least once); DeletionHooks calls each hook and removes the rows, and gives
 * up with a warning on a row taken more than MAX_ATTEMPTS times. A worker stopping while a hook
 * that ignores its signal is pending stops waiting for it (before: its stop waited out
 * FLEET_HOOK_TIMEOUT_MS, holding every close after it) and keeps the row owed.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DataDeletion } from "../src/shared/store/data-deletion.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { claimMs, DeletionHooks, MAX_ATTEMPTS, UNTAKEN_MS } from "../src/worker/deletion-hooks.js";
import { Extensions } from "../src/worker/hook-runner.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

const agent = { model: { provider: "scripted" as const, steps: [{ text: "done" }] } };

describe("onSessionDeleted outbox", () => {
  let fleet: FleetEnv;
  let store: DataDeletion;
  let queries: SessionQueries;
  beforeAll(async () => {
    fleet = await createFleetEnv("deletion-hooks");
    store = new DataDeletion(fleet.database);
    queries = new SessionQueries(fleet.database);
  }, 60_000);
  afterAll(async () => {
    await fleet?.close();
  });

  it("a delete writes the owed row; a claim hides it until it runs out, then it is taken again", async () => {
    const { id } = await queries.createSession({ agent: agent as never, tenant: "t1" });
    expect(await store.deleteSession("t1", id)).not.toBeNull();
    const [first] = await store.claimDeletions(10, 300);
    expect(first).toMatchObject({ sessionId: id, tenant: "t1", attempts: 1 });
    expect(await store.claimDeletions(10, 300)).toEqual([]);
    // The claimer died: after its claim another worker takes it.
    let again: Awaited<ReturnType<DataDeletion["claimDeletions"]>> = [];
    for (let i = 0; i < 100 && again.length === 0; i++) {
      await new Promise((r) => setTimeout(r, 50));
      again = await store.claimDeletions(10, 60_000);
    }
    expect(again).toMatchObject([{ sessionId: id, attempts: 2 }]);
    await store.forgetDeletions([id]);
    expect(await store.claimDeletions(10, 0)).toEqual([]);
  });

  it("retention deletes owe the hooks too; DeletionHooks calls each once, removes the rows, gives up after MAX_ATTEMPTS", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 12; i++) ids.push((await queries.createSession({ agent: agent as never })).id);
    const expired = await store.expireSessions(0, 100);
    expect(expired.sessionIds.sort()).toEqual([...ids].sort());
    const called: string[] = [];
    const warnings: string[] = [];
    const log = {
      warn: ((_o: object, message: string) => void warnings.push(message)) as never,
    };
    const extensions = new Extensions(
      [{ name: "record", onSessionDeleted: (id: string) => void called.push(id) }],
      { hookFailures: { inc: () => {} } } as never,
      log,
      1_000,
    );
    const hooks = new DeletionHooks(store, extensions, log, 1_000);
    expect(await hooks.drain()).toBe(12);
    expect(called.sort()).toEqual([...ids].sort());
    expect(await store.claimDeletions(100, 0)).toEqual([]);
    // A row whose claims all ran out (each worker died calling its hooks) is given up.
    await fleet.database
      .sql`insert into session_deletions (session_id, tenant, attempts) values ('poison', 't', ${MAX_ATTEMPTS})`;
    expect(await hooks.drain()).toBe(1);
    expect(called).not.toContain("poison");
    expect(warnings.join()).toMatch(/given up/);
    expect(claimMs(2, 1_000, 10)).toBeGreaterThanOrEqual(2 * 10 * 1_000);
  });

  it("rows no worker took for an hour are dropped (no worker has the hook); taken or recent ones stay", async () => {
    await fleet.database
      .sql`insert into session_deletions (session_id, tenant, claimed_until, attempts) values
      ('old', 't', now() - interval '2 hours', 0), ('recent', 't', now(), 0),
      ('taken', 't', now() - interval '2 hours', 1)`;
    expect(await store.dropUntakenDeletions(UNTAKEN_MS, 100)).toBe(1);
    const left = await fleet.database.sql<
      { session_id: string }[]
    >`select session_id from session_deletions order by 1`;
    expect(left.map((r) => r.session_id)).toEqual(["recent", "taken"]);
  });

  it("a stop while a hook that ignores its signal is pending: the stop does not wait for it, the row stays owed", async () => {
    await fleet.database.sql`delete from session_deletions`;
    const { id } = await queries.createSession({ agent: agent as never, tenant: "t1" });
    expect(await store.deleteSession("t1", id)).not.toBeNull();
    const called: string[] = [];
    let stopSeen = false;
    const failures: string[] = [];
    const extensions = new Extensions(
      [
        {
          name: "stuck",
          onSessionDeleted: (sessionId: string, { signal }: { signal: AbortSignal }) => {
            called.push(`stuck ${sessionId}`);
            signal.addEventListener("abort", () => {
              stopSeen = true;
            });
            return new Promise<void>(() => {}); // never settles, whatever its signal says
          },
        },
        { name: "next", onSessionDeleted: (sessionId: string) => void called.push(`next ${sessionId}`) },
      ],
      { hookFailures: { inc: ({ hook }: { hook: string }) => void failures.push(hook) } } as never,
      { warn: () => {} },
      600_000,
    );
    const hooks = new DeletionHooks(store, extensions, { warn: () => {} }, 600_000);
    hooks.start();
    await waitFor(async () => called.length > 0, 20_000, "the stuck hook");
    // Before: this waited the hook's 600 s out (the test's own time limit ended it).
    await hooks.stop();
    expect(stopSeen).toBe(true);
    expect(called).toEqual([`stuck ${id}`]);
    expect(failures).toEqual([]);
    // Not handled, so not forgotten: taken again once the claim runs out (at least once).
    const owed = await fleet.database.sql<{ session_id: string }[]>`select session_id from session_deletions`;
    expect(owed.map((r) => r.session_id)).toEqual([id]);
  }, 30_000);
});
