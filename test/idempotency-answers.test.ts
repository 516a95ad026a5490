/**
 * What an `Idempotency-Key` keeps of an answer (contracts §9) when something goes wrong around
 * it: storing the answer fails, or the answer only says "not now".
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { postKeyed, readAnswer } from "./support/answer.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

describe("Idempotency-Key answers", () => {
  let fleet: FleetEnv;
  let base: string;
  let apiKey: string;

  beforeAll(async () => {
    fleet = await createFleetEnv("idemanswers");
    apiKey = (await new ApiKeys(fleet.database).create("a")).key;
    base = (await fleet.startApi()).api.url;
  }, 60_000);
  afterAll(() => fleet?.close());

  const post = (path: string, body: unknown, idempotencyKey: string) =>
    postKeyed(base, apiKey, path, body, idempotencyKey).then(readAnswer);

  it("a session created whose answer could not be stored is still answered 201, not a 5xx that says retry", async () => {
    const { sql } = fleet.database;
    // Postgres refuses to store this key's answer (as a connection lost at that moment would).
    await sql.unsafe(`
      create function refuse_answer() returns trigger language plpgsql as $$
      begin
        if new.key = 'store-fails' and new.status_code is not null then
          raise exception 'answer not stored';
        end if;
        return new;
      end $$;
      create trigger refuse_answer before update on idempotency_keys
        for each row execute function refuse_answer();`);
    const body = { agent: AGENT, metadata: { probe: "store-fails" } };
    const first = await post("/v1/sessions", body, "store-fails");
    const sessions = await sql`select id from sessions where metadata->>'probe' = 'store-fails'`;
    expect(sessions.length).toBe(1);
    expect(first.status, first.text).toBe(201);
    expect(first.json.id).toBe(sessions[0]!.id);
  });

  it("a resume refused 409 running (a run was on its way) is not kept: the same key resumes once the run has gone", async () => {
    const created = await post(
      "/v1/sessions",
      { agent: AGENT, messages: [{ role: "user", content: "hi" }] },
      "running-create",
    );
    expect(created.status, created.text).toBe(201);
    const id = created.json.id as string;
    // No worker: the message's run stays queued.
    const sent = await post(`/v1/sessions/${id}/messages`, { content: "more" }, "running-send");
    expect(sent.status, sent.text).toBe(202);
    const refused = await post(`/v1/sessions/${id}/resume`, {}, "running-resume");
    expect(refused.status, refused.text).toBe(409);
    expect(refused.json.error.reason).toBe("running");
    // The run goes (cancelled); the history still ends with the user's message: resumable.
    const cancelled = await post(`/v1/sessions/${id}/cancel`, {}, "running-cancel");
    expect(cancelled.status, cancelled.text).toBe(202);
    const again = await post(`/v1/sessions/${id}/resume`, {}, "running-resume");
    expect(again.status, again.text).toBe(202);
    expect(again.json.kind).toBe("call_model");
    const { sql } = fleet.database;
    expect((await sql`select 1 from runs where session_id = ${id} and kind = 'resume'`).length).toBe(1);
  });

  it("a batch marked deleted whose sessions could not all be deleted is answered 200 complete: false, not a 5xx", async () => {
    const { sql } = fleet.database;
    const created = await post(
      "/v1/batches",
      { sessions: [1, 2].map(() => ({ agent: AGENT, metadata: { probe: "purge-fails" } })) },
      "purge-create",
    );
    expect(created.status, created.text).toBe(201);
    const id = created.json.id as string;
    // Postgres fails while the batch's sessions are deleted, after the batch was marked deleted.
    await sql.unsafe(`
      create function refuse_purge() returns trigger language plpgsql as $$
      begin
        if old.metadata->>'probe' = 'purge-fails' then raise exception 'sessions not deleted'; end if;
        return old;
      end $$;
      create trigger refuse_purge before delete on sessions for each row execute function refuse_purge();`);
    try {
      const remove = () =>
        fetch(`${base}/v1/batches/${id}`, {
          method: "DELETE",
          headers: { authorization: `Bearer ${apiKey}`, "idempotency-key": "purge-delete" },
        }).then(readAnswer);
      const first = await remove();
      // The batch is gone for the caller already (404, no webhook, its sessions cancelled).
      const gone = await fetch(`${base}/v1/batches/${id}`, {
        headers: { authorization: `Bearer ${apiKey}` },
      }).then(readAnswer);
      expect(gone.status).toBe(404);
      expect(first.status, first.text).toBe(200);
      expect(first.json).toEqual({ id, deleted: true, sessionsDeleted: 0, complete: false });
      const again = await remove();
      expect(again.status, again.text).toBe(200);
      expect(again.json).toEqual(first.json);
    } finally {
      await sql.unsafe("drop trigger refuse_purge on sessions");
    }
  });
});
