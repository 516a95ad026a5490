/**
 * `POST /v1/batches/:id/resume` and `fleet batch resume` against a real worker process: a
 * batch whose provider rejected every request (scripted `fault: "rejected"`, once per
 * session) is parked `provider_rejected` at once; after "the key is fixed" one pass of pages
 * resumes exactly those sessions, which then complete; a parked session with nothing to
 * resume is refused with its reason and stays parked; bad input is a 400 naming the field.
 * The page logic alone (tenant limits part-way, cursors): test/batch-resume-unit.test.ts.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetApiError, type FleetClient } from "../src/producer/client.js";
import { runFleetCli } from "./support/fleet-cli.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

const rejectedOnce = (i: number) => ({
  model: {
    provider: "scripted" as const,
    steps: [{ text: `answer ${i}`, fault: "rejected" as const, faultTimes: 1 }],
  },
});

describe("resuming a batch's parked sessions", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let url: string;

  beforeAll(async () => {
    fleet = await createFleetEnv("batch-resume");
    const started = await fleet.startApi();
    client = started.client;
    url = started.api.url;
    await fleet.spawnWorker({ WORKER_CONCURRENCY: "8" });
  }, 60_000);
  afterAll(() => fleet?.close());

  const fleetCli = (args: string[]) => runFleetCli(args, { ...fleet.env, FLEET_API_URL: url });

  async function parked(batch: string, reason?: string): Promise<string[]> {
    const { sessions } = await client.listSessions({
      batch,
      status: "parked",
      limit: 1_000,
      ...(reason ? { parkedReason: reason } : {}),
    });
    return sessions.map((s) => s.id).sort();
  }

  it("resumes exactly the sessions parked provider_rejected, page by page; the rest are refused and stay parked", async () => {
    const created = await client.createBatch([
      ...Array.from({ length: 5 }, (_, i) => ({ customId: `r-${i}`, agent: rejectedOnce(i), input: "go" })),
      {
        customId: "refusal",
        agent: { model: { provider: "scripted", steps: [{ text: "no", stopReason: "refusal" }] } },
        input: "go",
      },
    ]);
    const ids = new Map(created.sessions.map((s) => [s.customId, s.id]));
    const rejected = [...ids]
      .filter(([k]) => k !== "refusal")
      .map(([, v]) => v)
      .sort();
    await waitFor(
      async () => (await parked(created.id, "provider_rejected")).length === 5,
      20_000,
      "5 parked provider_rejected",
    );
    for (const id of rejected) {
      const session = await client.getSession(id);
      expect(session.parkedReason).toBe(
        "provider_rejected: scripted fault: 401 the provider rejected the request",
      );
      expect(session.runs).toHaveLength(1);
    }
    // The refusal's run ends `refused`; with no sweeper here, it is parked as the sweeper would.
    const refusal = ids.get("refusal")!;
    await waitFor(
      async () => (await client.getSession(refusal)).runs[0]?.status === "ended",
      20_000,
      "the refusal's run ended",
    );
    await fleet.database
      .sql`update sessions set status = 'parked', parked_reason = 'refused' where id = ${refusal}`;

    // One pass, in pages of 2: every provider_rejected session once, nothing else.
    const pages = [];
    let cursor: string | undefined;
    do {
      const page = await client.resumeBatch(created.id, {
        parkedReason: "provider_rejected",
        limit: 2,
        ...(cursor ? { cursor } : {}),
      });
      pages.push(page);
      cursor = page.nextCursor ?? undefined;
    } while (cursor);
    expect(pages.map((p) => p.resumed.length)).toEqual([2, 2, 1]);
    expect(pages.flatMap((p) => p.refused)).toEqual([]);
    expect(pages.flatMap((p) => p.resumed.map((r) => r.sessionId)).sort()).toEqual(rejected);
    for (const r of pages.flatMap((p) => p.resumed)) expect(r.kind).toBe("call_model");

    await waitFor(
      async () => (await client.getBatch(created.id)).counts.completed === 5,
      20_000,
      "5 completed",
    );
    for (const id of rejected) {
      const session = await client.getSession(id);
      expect(session.status).toBe("completed");
      expect(session.messages.map((m) => m.role)).toEqual(["user", "assistant"]);
      expect(session.runs.map((r) => [r.kind, r.trigger, r.endedReason])).toEqual([
        ["run", "api", "provider_error"],
        ["resume", "api", "completed"],
      ]);
    }
    expect(await parked(created.id)).toEqual([refusal]);

    // Without a reason: the refusal has nothing to resume; it is named and stays parked.
    const cli = await fleetCli(["batch", "resume", created.id]);
    expect(cli.code, cli.stderr).toBe(0);
    expect(JSON.parse(cli.stdout)).toEqual({ resumed: 0, refused: { refused: 1 } });
    expect(cli.stderr).toContain("resumed 0, nothing to resume in 1");
    expect(await parked(created.id)).toEqual([refusal]);
    expect((await client.getSession(refusal)).runs).toHaveLength(1);
  }, 60_000);

  it("refuses a bad cursor, a bad model and an unknown batch, touching nothing", async () => {
    const created = await client.createBatch([{ agent: rejectedOnce(9), input: "go" }]);
    await waitFor(async () => (await parked(created.id)).length === 1, 20_000, "parked");
    const failure = async (promise: Promise<unknown>) =>
      (await promise.catch((e: unknown) => e)) as FleetApiError;

    const badCursor = await failure(client.resumeBatch(created.id, { cursor: "nope" }));
    expect(badCursor).toBeInstanceOf(FleetApiError);
    expect([badCursor.status, badCursor.field]).toEqual([400, "cursor"]);
    const badModel = await failure(
      client.resumeBatch(created.id, { model: { provider: "nobody" } as never }),
    );
    expect([badModel.status, badModel.field]).toEqual([400, "model.provider"]);
    // A limit that is no whole number from 1 to 1,000 is said as the session list says it.
    for (const limit of [0, 1.5, 1_001, "2"]) {
      const badLimit = await failure(client.resumeBatch(created.id, { limit } as never));
      expect([badLimit.status, badLimit.field, badLimit.message], String(limit)).toEqual([
        400,
        "limit",
        "limit: must be a whole number from 1 to 1,000",
      ]);
    }
    // A parked reason no session can be parked for (a typo, another word, a detail without
    // its ": ") is a 400 naming the reasons, not a 202 that resumed nothing.
    for (const parkedReason of ["provider_rejectd", "failed", "provider_rejected:x", "provider_rejected: "]) {
      const badReason = await failure(client.resumeBatch(created.id, { parkedReason }));
      expect([badReason.status, badReason.field], parkedReason).toEqual([400, "parkedReason"]);
      expect(badReason.message).toMatch(/^parkedReason: must be a parked reason /);
    }
    expect((await failure(client.resumeBatch(created.id, { parkedReason: "x" }))).message).toContain(
      "(refused, context_full, unknown_stop, malformed, attempts_exhausted,",
    );
    const typo = await fleetCli(["batch", "resume", created.id, "--reason", "provider_rejectd"]);
    expect([typo.code, typo.stdout]).toEqual([2, ""]);
    expect(typo.stderr).toContain('"provider_rejectd" is none');
    // Named by its flag: it read "fleet batch resume: parkedReason: must be … (parkedReason)".
    expect(typo.stderr).toMatch(/^fleet batch resume: --reason: must be a parked reason \(/);
    expect(typo.stderr).not.toContain("parkedReason");
    const badModelCli = await fleetCli(["batch", "resume", created.id, "--model", '{"provider":"nope"}']);
    expect([badModelCli.code, badModelCli.stdout]).toEqual([2, ""]);
    expect(badModelCli.stderr).toMatch(/^fleet batch resume: --model: model\.provider: must be one of /);
    // An empty --reason (an unset "$REASON") is refused too, not dropped into a resume of all.
    const empty = await fleetCli(["batch", "resume", created.id, "--reason", ""]);
    expect([empty.code, empty.stdout], empty.stderr).toEqual([2, ""]);
    expect(empty.stderr).toContain('"" is none');
    expect(await parked(created.id)).toHaveLength(1);
    // A reason known, alone or with its detail, is a filter: here it matches nothing.
    for (const parkedReason of ["max_turns", "max_turns: 5 turns"]) {
      const page = await client.resumeBatch(created.id, { parkedReason });
      expect([page.resumed, page.refused], parkedReason).toEqual([[], []]);
    }
    const missing = await failure(client.resumeBatch("no-such-batch"));
    expect(missing.status).toBe(404);
    expect(await parked(created.id)).toHaveLength(1);

    const cli = await fleetCli(["batch", "resume", created.id, "--model", "{not json"]);
    expect(cli.code).toBe(2);
    expect(cli.stderr).toMatch(/^fleet batch resume: --model must be a MODEL as JSON/);
    expect(await parked(created.id)).toHaveLength(1);
  }, 60_000);
});
