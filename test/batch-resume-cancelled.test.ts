/**
 * `POST /v1/batches/:id/resume` (and `fleet batch resume`) of a cancelled batch. A pass walks the
 * batch's parked sessions; a cancelled batch's sessions are cancelled, not parked (contracts §9:
 * never resumed automatically, a new message re-opens one), so the pass resumed nothing and said
 * nothing (`{"resumed": 0, "refused": {}}`, exit 0). Now the first page of a pass over a
 * cancelled batch that finds nothing parked is a 409 `batch_cancelled` saying why and what
 * re-opens a cancelled session; the sessions of a cancelled batch that were parked before the
 * cancel are still resumed. No worker runs here: the runs stay queued.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetApiError, type FleetClient } from "../src/producer/client.js";
import { runFleetCli } from "./support/fleet-cli.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

describe("resuming a cancelled batch", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let url: string;

  beforeAll(async () => {
    fleet = await createFleetEnv("batch-resume-cancelled");
    const started = await fleet.startApi();
    client = started.client;
    url = started.api.url;
  }, 60_000);
  afterAll(() => fleet?.close());

  const fleetCli = (args: string[]) => runFleetCli(args, { ...fleet.env, FLEET_API_URL: url });
  const failure = async (promise: Promise<unknown>) =>
    (await promise.catch((e: unknown) => e)) as FleetApiError;

  it("a pass that finds nothing parked in a cancelled batch is a 409 batch_cancelled, in the API and the CLI", async () => {
    const created = await client.createBatch(
      Array.from({ length: 3 }, (_, i) => ({ customId: `c-${i}`, agent: AGENT, input: "go" })),
    );
    expect((await client.cancelBatch(created.id)).counts).toMatchObject({ total: 3, cancelled: 3 });
    const error = await failure(client.resumeBatch(created.id));
    expect(error).toBeInstanceOf(FleetApiError);
    expect([error.status, error.reason]).toEqual([409, "batch_cancelled"]);
    expect(error.message).toContain("was cancelled and has no session parked");
    expect(error.message).toContain("POST /v1/sessions/:id/messages");
    const filtered = await failure(client.resumeBatch(created.id, { parkedReason: "provider_rejected" }));
    expect([filtered.status, filtered.reason]).toEqual([409, "batch_cancelled"]);
    const cli = await fleetCli(["batch", "resume", created.id]);
    expect([cli.code, cli.stdout]).toEqual([2, ""]);
    expect(cli.stderr).toContain(`batch ${created.id} was cancelled and has no session parked`);
    // Nothing was touched.
    expect((await client.getBatch(created.id)).counts).toMatchObject({ cancelled: 3, queued: 0 });
  });

  it("a cancelled batch's session parked before the cancel is still resumed", async () => {
    const created = await client.createBatch([
      { customId: "parked", agent: AGENT, input: "go" },
      { customId: "queued", agent: AGENT, input: "go" },
    ]);
    const parked = created.sessions.find((s) => s.customId === "parked")!.id;
    // Parked as a run that ended `attempts_exhausted` would leave it (no worker here).
    await fleet.database.sql`update runs set status = 'ended', ended_reason = 'failed', ended_at = now()
                               where session_id = ${parked}`;
    await fleet.database
      .sql`update sessions set status = 'parked', parked_reason = 'attempts_exhausted' where id = ${parked}`;
    await client.cancelBatch(created.id);
    const page = await client.resumeBatch(created.id);
    // Its history is empty (its input was never appended): refused with that reason, as before.
    expect(page.resumed.length + page.refused.length).toBe(1);
    expect([...page.resumed, ...page.refused][0]!.sessionId).toBe(parked);
  });

  it("a running batch with one session cancelled still answers an empty page", async () => {
    const created = await client.createBatch([{ agent: AGENT, input: "go" }]);
    await client.cancelSession(created.sessions[0]!.id);
    const page = await client.resumeBatch(created.id);
    expect([page.resumed, page.refused, page.nextCursor]).toEqual([[], [], null]);
  });
});
