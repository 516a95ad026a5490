/**
 * `sessionEvents: false` (a session, every session of a batch, or one of its sessions): no
 * event stream is written for it by a worker, the sweeper's paths or a cancel; `GET /v1/sessions/:id/events` answers
 * 409 `session_events_off`; the batch's own progress, events and results are unchanged. Each
 * case has a control with events on in the same fleet, so the checks can fail.
 */
import { mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetApiError, type FleetClient, type FleetEvent } from "../src/producer/client.js";
import { EventWriter } from "../src/shared/event-writer.js";
import { eventStreamKey, seqKey } from "../src/shared/events.js";
import { runFleetCli } from "./support/fleet-cli.js";
import { createFleetEnv, type FleetEnv, type WorkerProcess, waitFor } from "./support/fleet-env.js";
import { readSse } from "./support/sse.js";

/** One tool call (a file written), then the answer: a run that writes every kind of event. */
const agent = (i: number) => ({
  model: {
    provider: "scripted" as const,
    steps: [
      { toolCalls: [{ name: "write_file", arguments: { path: `out-${i}.txt`, content: `${i}\n` } }] },
      { text: `done ${i}` },
    ],
  },
  tools: ["write_file"],
});

describe("sessionEvents: false", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let base: string;
  let worker: WorkerProcess;

  beforeAll(async () => {
    fleet = await createFleetEnv("eventsoff");
    const started = await fleet.startApi();
    client = started.client;
    base = started.api.url;
    worker = await fleet.spawnWorker();
  }, 60_000);
  afterAll(() => fleet?.close());

  /** Whether any of the session's event keys (the stream, its seq record) exists in Redis. */
  const hasStreamKeys = async (sessionId: string) =>
    (await fleet.redis.exists(
      eventStreamKey(fleet.config.prefix, sessionId),
      seqKey(fleet.config.prefix, sessionId),
    )) > 0;

  const ended = (batchId: string) => async () => (await client.getBatch(batchId)).status === "ended";

  it("a batch's sessions run to the end with no stream; the batch is followed as before; GET …/events is a 409", async () => {
    const off = await client.createBatch(
      Array.from({ length: 6 }, (_, i) => ({ agent: agent(i), input: "go", customId: `off-${i}` })),
      { sessionEvents: false },
    );
    const on = await client.createBatch([{ agent: agent(99), input: "go", customId: "on" }]);
    // The batch's own stream, read from its start while it runs.
    const batchEvents: FleetEvent[] = [];
    const follow = (async () => {
      for await (const event of client.batchEvents(off.id)) batchEvents.push(event);
    })();
    await waitFor(ended(off.id), 30_000, "the events-off batch to end");
    await waitFor(ended(on.id), 30_000, "the control batch to end");
    await follow;

    const batch = await client.getBatch(off.id);
    expect(batch).toMatchObject({
      status: "ended",
      sessionEvents: false,
      counts: { total: 6, completed: 6 },
    });
    expect((await client.getBatch(on.id)).sessionEvents).toBeUndefined();
    expect(batchEvents.filter((e) => e.type === "SESSION_ENDED")).toHaveLength(6);
    expect(batchEvents.at(-1)?.type).toBe("BATCH_COMPLETED");

    for (const { id } of off.sessions) {
      const session = await client.getSession(id);
      expect(session.sessionEvents).toBe(false);
      expect(session.messages.map((m) => m.role)).toEqual(["user", "assistant", "tool", "assistant"]);
      expect(await hasStreamKeys(id)).toBe(false);
    }
    const control = on.sessions[0]!.id;
    expect((await client.getSession(control)).sessionEvents).toBeUndefined();
    expect(await hasStreamKeys(control)).toBe(true);

    const offId = off.sessions[0]!.id;
    const refused = await readSse(`${base}/v1/sessions/${offId}/events`, { stop: () => true });
    expect(refused.status).toBe(409);
    expect(refused.body).toMatchObject({ error: { reason: "session_events_off" } });
    expect(JSON.stringify(refused.body)).toContain(`GET /v1/sessions/${offId}`);
    // The client's iterator rejects at once instead of reconnecting.
    const iterate = async () => {
      for await (const _ of client.events(offId)) break;
    };
    const error = await iterate().then(
      () => null,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(FleetApiError);
    expect(error).toMatchObject({ status: 409, reason: "session_events_off" });
    // Results are unchanged.
    const results: { customId: string; status: string; output: string }[] = [];
    for await (const result of client.batchResults(off.id)) results.push(result as never);
    expect(results.map((r) => [r.customId, r.status, r.output]).sort()).toEqual(
      Array.from({ length: 6 }, (_, i) => [`off-${i}`, "completed", `done ${i}`]),
    );
  }, 60_000);

  it("sessions appended to an open batch take its setting; a single session can be created without events", async () => {
    const open = await client.createBatch([{ agent: agent(10), input: "go" }], {
      open: true,
      sessionEvents: false,
    });
    const part = await client.appendToBatch(open.id, [{ agent: agent(11), input: "go" }], { close: true });
    await waitFor(ended(open.id), 30_000, "the open batch to end");
    for (const { id } of [...open.sessions, ...part.sessions]) {
      expect((await client.getSession(id)).sessionEvents).toBe(false);
      expect(await hasStreamKeys(id)).toBe(false);
    }
    const single = await client.createSession({ agent: agent(12), sessionEvents: false });
    const { runId } = await client.send(single.id, "go");
    await waitFor(
      async () =>
        (await client.getSession(single.id)).runs.some((r) => r.id === runId && r.status === "ended"),
      30_000,
      "the single session's run to end",
    );
    expect((await client.getSession(single.id)).sessionEvents).toBe(false);
    expect(await hasStreamKeys(single.id)).toBe(false);
    // stream(): the message is queued, then following it is refused; the run goes on.
    const streamed = client.stream(single.id, "again");
    await expect(streamed.next()).rejects.toMatchObject({ status: 409, reason: "session_events_off" });
    await waitFor(
      async () => (await client.getSession(single.id)).runs.filter((r) => r.status === "ended").length === 2,
      30_000,
      "the streamed message's run to end",
    );
    expect(await hasStreamKeys(single.id)).toBe(false);

    const bad = await fetch(`${base}/v1/sessions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ agent: agent(13), sessionEvents: "no" }),
    });
    expect(bad.status).toBe(400);
    expect(await bad.json()).toMatchObject({ error: { field: "sessionEvents" } });
  }, 60_000);

  it("one session of a batch can turn its own stream off; true in a batch without streams is a 400, at creation and on an append", async () => {
    // A batch with streams, one of whose sessions has none, and an open one whose later part does the same.
    const mixed = await client.createBatch([
      { agent: agent(50), input: "go", customId: "watched" },
      { agent: agent(51), input: "go", customId: "quiet", sessionEvents: false },
      { agent: agent(52), input: "go", customId: "explicit", sessionEvents: true },
    ]);
    const open = await client.createBatch([{ agent: agent(53), input: "go" }], { open: true });
    const part = await client.appendToBatch(
      open.id,
      [
        { agent: agent(54), input: "go", sessionEvents: false },
        { agent: agent(55), input: "go" },
      ],
      { close: true },
    );
    await waitFor(ended(mixed.id), 30_000, "the mixed batch to end");
    await waitFor(ended(open.id), 30_000, "the open batch to end");
    const byCustomId = new Map(mixed.sessions.map((s) => [s.customId, s.id]));
    const streamless = [byCustomId.get("quiet")!, part.sessions[0]!.id];
    const streamed = [
      byCustomId.get("watched")!,
      byCustomId.get("explicit")!,
      open.sessions[0]!.id,
      part.sessions[1]!.id,
    ];
    for (const id of streamless) {
      expect((await client.getSession(id)).sessionEvents).toBe(false);
      expect(await hasStreamKeys(id)).toBe(false);
      await expect(client.events(id).next()).rejects.toMatchObject({
        status: 409,
        reason: "session_events_off",
      });
    }
    for (const id of streamed) {
      expect((await client.getSession(id)).sessionEvents).toBeUndefined();
      expect(await hasStreamKeys(id)).toBe(true);
    }
    // The batch itself has streams, so its JSON says nothing of them; each session's JSON says its own.
    expect((await client.getBatch(mixed.id)).sessionEvents).toBeUndefined();

    // A batch created without streams promised that none of its sessions has one.
    const refused = await fetch(`${base}/v1/batches`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        sessions: [
          { agent: agent(56), input: "go" },
          { agent: agent(57), input: "go", sessionEvents: true },
        ],
        sessionEvents: false,
      }),
    });
    expect(refused.status).toBe(400);
    expect(await refused.json()).toMatchObject({ error: { field: "sessions[1].sessionEvents" } });
    const without = await client.createBatch([{ agent: agent(58), input: "go", sessionEvents: false }], {
      open: true,
      sessionEvents: false,
    });
    await expect(
      client.appendToBatch(without.id, [
        { agent: agent(59), input: "go", sessionEvents: false },
        { agent: agent(60), input: "go", sessionEvents: true },
      ]),
    ).rejects.toMatchObject({ status: 400, field: "sessions[1].sessionEvents" });
    // Nothing of the refused part was stored; the batch still takes a part that asks for nothing.
    const fine = await client.appendToBatch(without.id, [{ agent: agent(61), input: "go" }], { close: true });
    await waitFor(ended(without.id), 30_000, "the streamless batch to end");
    expect((await client.getBatch(without.id)).counts.total).toBe(2);
    expect(await hasStreamKeys(fine.sessions[0]!.id)).toBe(false);
  }, 90_000);

  it("the sweeper's and the API's event paths (a lost run end, a parked session, a cancel) write nothing for it", async () => {
    // A finished session of each kind, then the event writer the sweeper uses, as after a crash.
    const [off] = (await client.createBatch([{ agent: agent(20), input: "go" }], { sessionEvents: false }))
      .sessions;
    const [on] = (await client.createBatch([{ agent: agent(21), input: "go" }])).sessions;
    await waitFor(
      async () =>
        (await client.getSession(off!.id)).tailState === "completed" &&
        (await client.getSession(on!.id)).tailState === "completed",
      30_000,
      "both sessions to complete",
    );
    // The worker writes a run's RUN_COMPLETED just after the statement that ends it: wait for it,
    // or it could land after the drop below and leave the sweeper's path nothing to repair.
    await waitFor(
      async () => (await fleet.redis.hget(seqKey(fleet.config.prefix, on!.id), "done")) !== null,
      10_000,
      "the control's RUN_COMPLETED in its stream",
    );
    const writer = new EventWriter(fleet.redis, fleet.config.prefix);
    // The control's stream is dropped, as if Redis had lost it: the sweeper's path writes it again.
    await fleet.redis.del(eventStreamKey(fleet.config.prefix, on!.id), seqKey(fleet.config.prefix, on!.id));
    expect(await writer.missingRunEnd(fleet.database, on!.id, 0)).not.toBeNull();
    expect(await hasStreamKeys(on!.id)).toBe(true);
    expect(await writer.missingRunEnd(fleet.database, off!.id, 0)).toBeNull();
    await writer.writeAfterSync(fleet.database, off!.id, [{ type: "SESSION_PARKED", reason: "test" }]);
    expect(await hasStreamKeys(off!.id)).toBe(false);

    // A cancel of queued runs: no worker takes them (stopped first), the API ends them.
    worker.child.kill("SIGKILL");
    await worker.exited;
    const offQueued = await client.createBatch([{ agent: agent(22), input: "go" }], { sessionEvents: false });
    const onQueued = await client.createBatch([{ agent: agent(23), input: "go" }]);
    await client.cancelBatch(offQueued.id);
    await client.cancelBatch(onQueued.id);
    await waitFor(() => hasStreamKeys(onQueued.sessions[0]!.id), 10_000, "the control's RUN_COMPLETED");
    expect(await hasStreamKeys(offQueued.sessions[0]!.id)).toBe(false);
    worker = await fleet.spawnWorker();
  }, 60_000);

  it("`fleet batch submit --no-session-events` creates the batch without session events", async () => {
    const file = join(await mkdtemp(join(tmpdir(), "fleet-eventsoff-")), "batch.jsonl");
    await writeFile(
      file,
      `${[0, 1].map((i) => JSON.stringify({ customId: `cli-${i}`, agent: agent(30 + i), input: "go" })).join("\n")}\n`,
    );
    const result = await runFleetCli(
      ["batch", "submit", file, "--no-session-events", "--wait", "--api", base],
      {},
    );
    expect(result.code, result.stderr).toBe(0);
    const batch = JSON.parse(result.stdout) as {
      id: string;
      sessionEvents?: boolean;
      counts: { completed: number };
    };
    expect(batch).toMatchObject({ sessionEvents: false, counts: { completed: 2 } });

    // Without the flag, a line of its own can turn its session's stream off.
    const mixed = join(dirname(file), "mixed.jsonl");
    await writeFile(
      mixed,
      `${[
        { customId: "line-on", agent: agent(42), input: "go" },
        { customId: "line-off", agent: agent(43), input: "go", sessionEvents: false },
      ]
        .map((line) => JSON.stringify(line))
        .join("\n")}\n`,
    );
    const second = await runFleetCli(["batch", "submit", mixed, "--wait", "--api", base], {});
    expect(second.code, second.stderr).toBe(0);
    const { id } = JSON.parse(second.stdout) as { id: string };
    const byCustomId = new Map<string | null, string>();
    for await (const result of client.batchResults(id)) byCustomId.set(result.customId, result.sessionId);
    expect((await client.getSession(byCustomId.get("line-off")!)).sessionEvents).toBe(false);
    expect(await hasStreamKeys(byCustomId.get("line-off")!)).toBe(false);
    expect(await hasStreamKeys(byCustomId.get("line-on")!)).toBe(true);
  }, 60_000);
});
