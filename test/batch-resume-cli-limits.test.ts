/**
 * `fleet batch resume` against a tenant's active-session cap (contracts §9, §10), as a user runs
 * it: when the cap refuses the first session of a page (a 429, nothing done), the command says
 * at once that it waits for room and goes on once there is some, as `submit` does with a part,
 * rather than the client waiting 30 s in silence and the command then failing with the pass
 * half done.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { runFleetCli } from "./support/fleet-cli.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

describe("fleet batch resume under FLEET_TENANT_MAX_ACTIVE_SESSIONS", () => {
  let fleet: FleetEnv;
  let url: string;
  let client: FleetClient;

  beforeAll(async () => {
    fleet = await createFleetEnv("batch-resume-cli-limits", {
      env: { FLEET_TENANT_MAX_ACTIVE_SESSIONS: "4" },
    });
    const started = await fleet.startApi();
    url = started.api.url;
    client = started.client;
  }, 60_000);
  afterAll(() => fleet?.close());

  it("says it waits for room when the cap refuses a page's first session, and resumes once there is some", async () => {
    // Three sessions parked after their attempts ran out (as a worker leaves them), with a
    // question still to answer.
    const parked = await client.createBatch(
      Array.from({ length: 3 }, (_, i) => ({
        agent: AGENT,
        messages: [{ role: "user" as const, content: `q${i}` }],
      })),
    );
    const ids = parked.sessions.map((s) => s.id);
    await fleet.database.sql`
      update sessions set status = 'parked', parked_reason = 'attempts_exhausted' where id in ${fleet.database.sql(ids)}`;
    // The tenant's other batch holds all of its room (no worker: its runs stay queued).
    const blockers = await client.createBatch(
      Array.from({ length: 4 }, (_, i) => ({ agent: AGENT, input: `go ${i}` })),
    );

    let cancelled: Promise<unknown> | undefined;
    const resumed = await runFleetCli(
      ["batch", "resume", parked.id],
      { ...fleet.env, FLEET_API_URL: url },
      90_000,
      undefined,
      (stderr) => {
        // Room is made once the command says it waits for it.
        if (cancelled === undefined && /waiting for room/.test(stderr))
          cancelled = client.cancelBatch(blockers.id);
      },
    );
    await cancelled;
    expect(resumed.stderr).toMatch(/a tenant limit was reached .*active sessions.*; waiting for room/);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(JSON.parse(resumed.stdout)).toEqual({ resumed: 3, refused: {} });
    const [row] = await fleet.database.sql<{ n: number }[]>`
      select count(*)::int as n from runs where session_id in ${fleet.database.sql(ids)} and kind = 'resume'`;
    expect(row!.n).toBe(3);
  }, 120_000);
});
