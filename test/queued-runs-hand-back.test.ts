/**
 * FLEET_SESSION_MAX_QUEUED_RUNS and a run its worker hands back while it waits for its
 * endpoint's capacity (contracts §15, capacity-waits.ts): the run goes from `running` back to
 * `queued`, its input already stored in the history. The bound counts the runs with input not
 * yet taken by a worker, checked by the API's send; the hand-back is the worker's statement,
 * which checks nothing. Counted by status alone, the run left the count when its worker took
 * it, a send took its place, and the hand-back brought it back: two runs counted of a bound of
 * one, and a send was refused `queued_runs` while no run waited to start. The worker's
 * statements are the store's own (claim, start, hand-back), in the order a worker runs them,
 * against the real API, Postgres and Redis; no worker process, so nothing else moves.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetApiError, FleetClient } from "../src/producer/client.js";
import { CapacityWaits } from "../src/shared/store/capacity-waits.js";
import { FencedWrites } from "../src/shared/store/fenced-writes.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

let fleet: FleetEnv;
let client: FleetClient;
let writes: FencedWrites;
let waits: CapacityWaits;

beforeAll(async () => {
  fleet = await createFleetEnv("queued-runs-hand-back", { env: { FLEET_SESSION_MAX_QUEUED_RUNS: "1" } });
  const { api } = await fleet.startApi();
  client = new FleetClient({ baseUrl: api.url, maxLimitWaitMs: 0 });
  writes = new FencedWrites(fleet.database);
  waits = new CapacityWaits(fleet.database);
}, 60_000);
afterAll(() => fleet?.close());

/** What a send gets: "accepted", or the 429's limit and message. */
async function send(sessionId: string, content: string): Promise<string> {
  try {
    await client.send(sessionId, content);
    return "accepted";
  } catch (error) {
    if (error instanceof FleetApiError && error.status === 429) return `429 ${error.limit}: ${error.message}`;
    throw error;
  }
}

/** A worker's claim and start of the session's oldest queued run, as session-job.ts does them. */
async function takeRun(sessionId: string): Promise<{ runId: string; epoch: number }> {
  const claim = (await writes.claimSession(sessionId, "w1"))!;
  const [run] = await fleet.database.sql<{ id: string; input: string }[]>`
    select id, input from runs where session_id = ${sessionId} and status = 'queued' order by created_at limit 1`;
  const [row] = await fleet.database.sql<
    { last_seq: number }[]
  >`select last_seq from sessions where id = ${sessionId}`;
  const started = await writes.startRun(
    { sessionId, epoch: claim.epoch },
    { lastSeq: row!.last_seq, lastStepSeq: null },
    { id: run!.id, workerId: "w1", resumeKind: null },
    [{ role: "user", content: run!.input }],
    "awaiting_model",
  );
  expect(started).not.toBeNull();
  return { runId: run!.id, epoch: claim.epoch };
}

/** The worker hands the run back: its endpoint has no capacity for it yet (hand-back.ts). */
async function handBack(sessionId: string, taken: { runId: string; epoch: number }): Promise<void> {
  const outcome = await waits.handBack(
    { sessionId, epoch: taken.epoch },
    taken.runId,
    { inputTokens: 0, outputTokens: 0, handBacks: 1, turns: 0 },
    { unreserveModelCall: false },
  );
  expect(outcome).toBe("handed");
}

/** The session's runs with input queued: [started before (handed back), never started]. */
async function queued(sessionId: string): Promise<{ handedBack: number; waiting: number }> {
  const [row] = await fleet.database.sql<{ handed_back: number; waiting: number }[]>`
    select count(*) filter (where started_at is not null)::int as handed_back,
           count(*) filter (where started_at is null)::int as waiting
      from runs where session_id = ${sessionId} and kind = 'run' and status = 'queued'`;
  return { handedBack: row!.handed_back, waiting: row!.waiting };
}

describe("queued runs per session and a run handed back for capacity", () => {
  it("does not count a handed-back run as waiting to start: a send to its session fits", async () => {
    const { id } = await client.createSession({ agent: AGENT });
    expect(await send(id, "first")).toBe("accepted");
    await handBack(id, await takeRun(id));
    expect(await queued(id)).toEqual({ handedBack: 1, waiting: 0 });
    // Nothing of this session waits to start: its one run was taken, and waits for capacity.
    expect(await send(id, "second")).toBe("accepted");
    expect(await queued(id)).toEqual({ handedBack: 1, waiting: 1 });
    // One waits now: the bound is reached.
    expect(await send(id, "third")).toMatch(/^429 queued_runs: .*1 are queued/);
  }, 30_000);

  it("holds the bound when a send takes the taken run's place before the hand-back brings it back", async () => {
    const { id } = await client.createSession({ agent: AGENT });
    expect(await send(id, "first")).toBe("accepted");
    const taken = await takeRun(id);
    // Between the worker's start and its hand-back: the run is the worker's, a send fits.
    expect(await send(id, "second")).toBe("accepted");
    await handBack(id, taken);
    // The hand-back brought back no input waiting to start: the bound's count is still 1, not 2.
    expect(await queued(id)).toEqual({ handedBack: 1, waiting: 1 });
    expect(await send(id, "third")).toMatch(/^429 queued_runs: .*1 are queued/);
  }, 30_000);
});
