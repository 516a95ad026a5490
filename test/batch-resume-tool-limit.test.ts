/**
 * `POST /v1/batches/:id/resume` with a `model` holds each session to the chat-completions limit
 * of 128 tools (MAX_OPENAI_CHAT_TOOLS), as `POST /v1/sessions/:id/resume` and creation do: every
 * session goes through the one explicit resume (FleetService.resume, assertToolsFit). A session
 * whose agent lists more is the 400 naming `model`, nothing queued for it; the sessions before
 * it on the page are resumed, and the next page is the 400 (as a cost budget without a price is:
 * resume-model-price.test.ts).
 *
 * The sessions are created with tools the fleet knows and then given 129 in the stored agent,
 * as an agent accepted before the limit (or with a compatible server's model) holds them.
 */
import { describe, expect, it } from "vitest";
import { keyedApiForFile } from "./support/answer.js";

const SCRIPTED = { provider: "scripted" as const, steps: [{ text: "ok" }] };
/** OpenAI chat completions behind a declared endpoint: held to 128 tools. */
const CHAT = { provider: "openai" as const, endpoint: "oai", model: "gpt-4o" };
const HISTORY = [{ role: "user", content: "hi" }];
const MANY = Array.from({ length: 129 }, (_, i) => `tool_${i}`);

describe("a batch resume's model and the 128 tools of chat completions", () => {
  const api = keyedApiForFile("batchresumetools", {
    FLEET_MODEL_ENDPOINTS: JSON.stringify({
      oai: { provider: "openai", baseUrl: "http://127.0.0.1:9/v1" },
    }),
  });
  const { post, runsOf } = api;

  it("the session with 129 tools is refused per session, with the single resume's 400", async () => {
    const batch = await post("/v1/batches", {
      sessions: [
        { agent: { model: SCRIPTED }, messages: HISTORY, customId: "few" },
        { agent: { model: SCRIPTED }, messages: HISTORY, customId: "many" },
      ],
    });
    expect(batch.status, batch.text).toBe(201);
    const [few, many] = batch.json.sessions.map((s: { id: string }) => s.id) as [string, string];
    await api.fleet.database
      .sql`update sessions set agent = jsonb_set(agent, '{tools}', ${JSON.stringify(MANY)}::jsonb)
      where id = ${many}`;
    // The list's order is newest activity first: the session with few tools comes first.
    await api.fleet.database.sql`update sessions set status = 'parked', parked_reason = 'attempts_exhausted',
      updated_at = now() - (case when id = ${few} then interval '1 minute' else interval '2 minutes' end)
      where id in (${few}, ${many})`;
    const single = await post(`/v1/sessions/${many}/resume`, { model: CHAT });
    expect(single.status, single.text).toBe(400);
    const first = await post(`/v1/batches/${batch.json.id}/resume`, { model: CHAT });
    expect(first.status, first.text).toBe(202);
    expect(first.json.resumed.map((r: { sessionId: string }) => r.sessionId)).toEqual([few]);
    const next = await post(`/v1/batches/${batch.json.id}/resume`, {
      model: CHAT,
      cursor: first.json.nextCursor,
    });
    expect(next.status, next.text).toBe(400);
    expect(next.json.error).toEqual(single.json.error);
    expect(next.json.error).toMatchObject({ code: "invalid_request", field: "model" });
    expect(next.json.error.message).toContain("at most 128 tools; the session's agent lists 129");
    expect(await runsOf(few)).toBe(1);
    expect(await runsOf(many)).toBe(0);
  });
});
