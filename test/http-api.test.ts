/**
 * The HTTP API of contracts.md §4 through plain `fetch`: error answers (status, code,
 * message naming the field, no internals) and the shapes of successful answers.
 */
import { brotliCompressSync, gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { type Answer, readAnswer } from "./support/answer.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/;
const SCRIPTED = { provider: "scripted" as const, steps: [{ text: "ok" }] };
const AGENT = { model: SCRIPTED };
const UNKNOWN = "00000000-0000-4000-8000-000000000000";

describe("HTTP API", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let base: string;

  async function call(method: string, path: string, body?: unknown, rawBody?: string): Promise<Answer> {
    const hasBody = body !== undefined || rawBody !== undefined;
    const response = await fetch(`${base}${path}`, {
      method,
      headers: hasBody ? { "content-type": "application/json" } : {},
      body: rawBody ?? (body === undefined ? undefined : JSON.stringify(body)),
    });
    return readAnswer(response);
  }

  async function countSessions(): Promise<number> {
    const [row] = await fleet.database.sql<{ n: number }[]>`select count(*)::int as n from sessions`;
    return row!.n;
  }

  async function countMessages(): Promise<number> {
    const [row] = await fleet.database.sql<{ n: number }[]>`select count(*)::int as n from messages`;
    return row!.n;
  }

  /** A 4xx answer of the error shape, with no stack trace in it. */
  function expectError(answer: Answer, status: number, code?: string): void {
    expect(answer.status, answer.text).toBe(status);
    expect(answer.contentType).toMatch(/application\/json/);
    expect(answer.json).toMatchObject({ error: { code: expect.any(String), message: expect.any(String) } });
    if (code) expect(answer.json.error.code).toBe(code);
    expect(answer.text).not.toContain("    at ");
    expect(answer.text).not.toMatch(/node_modules|\.ts:\d+/);
  }

  beforeAll(async () => {
    fleet = await createFleetEnv("httpapi");
    const started = await fleet.startApi();
    client = started.client;
    base = started.api.url;
  });
  afterAll(async () => fleet?.close());

  describe("400s name the field and store nothing", () => {
    it("rejects an unknown model provider naming agent.model.provider", async () => {
      const before = await countSessions();
      const answer = await call("POST", "/v1/sessions", { agent: { model: { provider: "nope" } } });
      expectError(answer, 400, "invalid_request");
      expect(answer.json.error.field).toBe("agent.model.provider");
      expect(answer.json.error.message).toContain("agent.model.provider");
      expect(await countSessions()).toBe(before);
    });

    it("rejects a missing agent naming agent", async () => {
      const answer = await call("POST", "/v1/sessions", {});
      expectError(answer, 400, "invalid_request");
      expect(answer.json.error.field).toMatch(/^agent/);
      // Said plainly: zod's own words were "agent: expected nonoptional, received undefined".
      expect(answer.json.error.message).toBe("agent: is required");
    });

    it("says a missing field of any type is required, on every route, not zod's `expected string, received undefined`", async () => {
      const { id } = await client.createSession({ agent: AGENT });
      const cases: [string, unknown, string][] = [
        [`/v1/sessions/${id}/messages`, {}, "content: is required"],
        [`/v1/sessions/${id}/messages`, { content: "x", goal: {} }, "goal.text: is required"],
        ["/v1/sessions", { agent: { model: { provider: "openai" } } }, "agent.model.model: is required"],
        ["/v1/batches", {}, "sessions: is required"],
      ];
      for (const [path, body, said] of cases) {
        const answer = await call("POST", path, body);
        expectError(answer, 400, "invalid_request");
        expect(answer.json.error.message, JSON.stringify(body)).toBe(said);
      }
    });

    it("names an empty id in the URL quoted, and one with spaces or invisible characters, on every kind of id", async () => {
      const cases: [string, string, string][] = [
        ["DELETE", "/v1/sessions/", 'session "" not found'],
        ["GET", "/v1/batches/", 'batch "" not found'],
        ["GET", "/v1/runs/", 'run "" not found'],
        // Spaces and invisible characters too (an id pasted with its line's end): "session   not
        // found" showed nothing of them.
        ["GET", "/v1/sessions/%20", 'session " " not found'],
        ["GET", "/v1/batches/abc%0A", 'batch "abc\\n" not found'],
        ["GET", "/v1/runs/a%09b", 'run "a\\tb" not found'],
        ["GET", "/v1/sessions/x%E2%80%8B", 'session "x\\u200b" not found'],
      ];
      for (const [method, path, said] of cases) {
        const answer = await call(method, path);
        expectError(answer, 404, "not_found");
        expect(answer.json.error.message, path).toBe(said);
      }
    });

    it("says a body of null or of the wrong type is what it is, not `undefined`", async () => {
      const cases: [string, string][] = [
        ["null", "the body must be a JSON object, not null"],
        ["[]", "the body must be a JSON object, not an array"],
        ['"text"', "the body must be a JSON object, not a string"],
      ];
      for (const [raw, said] of cases) {
        const answer = await call("POST", "/v1/sessions", undefined, raw);
        expectError(answer, 400, "invalid_request");
        expect(answer.json.error.message, raw).toBe(said);
      }
      // A route whose body is optional still takes none, and null.
      const { id } = await client.createSession({ agent: AGENT });
      expect((await call("POST", `/v1/sessions/${id}/cancel`, undefined, "null")).status).toBe(202);
    });

    it("rejects an API key in the model, pointing at the environment", async () => {
      const before = await countSessions();
      const answer = await call("POST", "/v1/sessions", {
        agent: { model: { provider: "openai", model: "gpt-4o-mini", apiKey: "sk-secret-123" } },
      });
      expectError(answer, 400, "invalid_request");
      expect(answer.json.error.field).toBe("agent.model.apiKey");
      expect(answer.json.error.message).toMatch(/environment/);
      expect(answer.text).not.toContain("sk-secret-123");
      expect(await countSessions()).toBe(before);
    });

    it("rejects an imported history whose assistant message lacks stopReason, storing nothing", async () => {
      const before = await countSessions();
      const messagesBefore = await countMessages();
      const answer = await call("POST", "/v1/sessions", {
        agent: AGENT,
        messages: [
          { role: "user", content: "hi" },
          { role: "assistant", content: "hello" },
        ],
      });
      expectError(answer, 400, "invalid_request");
      expect(answer.json.error.field).toBe("messages[1].stopReason");
      expect(answer.json.error.message).toContain("messages[1].stopReason");
      expect(await countSessions()).toBe(before);
      expect(await countMessages()).toBe(messagesBefore);
    });

    it("rejects an unknown top-level field", async () => {
      const answer = await call("POST", "/v1/sessions", { agent: AGENT, bogus: 1 });
      expectError(answer, 400, "invalid_request");
      expect(answer.json.error.message).toContain("bogus");
    });

    it("rejects an empty message content naming content", async () => {
      const { id } = await client.createSession({ agent: AGENT });
      const answer = await call("POST", `/v1/sessions/${id}/messages`, { content: "" });
      expectError(answer, 400, "invalid_request");
      expect(answer.json.error.field).toBe("content");
      const [runs] = await fleet.database.sql<{ n: number }[]>`
        select count(*)::int as n from runs where session_id = ${id}`;
      expect(runs!.n).toBe(0);
    });

    it("rejects a resume naming an invalid model", async () => {
      const { id } = await client.createSession({ agent: AGENT });
      const answer = await call("POST", `/v1/sessions/${id}/resume`, { model: { provider: "scripted" } });
      expectError(answer, 400, "invalid_request");
      expect(answer.json.error.field).toBe("model.steps");
    });

    it("a number beyond a double (1e400) is a 400 naming it, not stored as null", async () => {
      const before = await countSessions();
      for (const [raw, field] of [
        [
          '{"agent": {"model": {"provider": "scripted", "steps": [{"text": "x"}]}}, "metadata": {"a": [1, -1e400]}}',
          "metadata.a[1]",
        ],
        [
          '{"agent": {"model": {"provider": "scripted", "steps": [{"toolCalls": [{"name": "t", "arguments": {"n": 1e400}}]}]}}}',
          "agent.model.steps[0].toolCalls[0].arguments.n",
        ],
      ] as const) {
        const answer = await call("POST", "/v1/sessions", undefined, raw);
        expectError(answer, 400, "invalid_request");
        expect(answer.json.error.field).toBe(field);
        expect(answer.json.error.message).toMatch(/too large for a JSON double/);
      }
      expect(await countSessions()).toBe(before);
    });

    it("an object of more than 10,000 keys is a 400 naming it, and no 400 echoes the body's keys back", async () => {
      // Before: 1.2 million unknown keys (14 MB) held the event loop 5.6 s and were all named in a
      // 15.7 MB answer; a key of 1 MB came back whole.
      const before = await countSessions();
      const manyKeys = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, 1]));
      const inAgent = await call("POST", "/v1/sessions", { agent: { ...AGENT, ...manyKeys(10_001) } });
      expectError(inAgent, 400, "invalid_request");
      expect(inAgent.json.error).toEqual({
        code: "invalid_request",
        field: "agent",
        message: "agent: has more than 10,000 keys",
      });
      const atTop = await call("POST", "/v1/sessions", { agent: AGENT, ...manyKeys(200_000) });
      expectError(atTop, 400, "invalid_request");
      expect(atTop.json.error.field).toBe("");
      expect(atTop.text.length).toBeLessThan(1_000);
      // Unknown keys below the bound are named, ten at most, each cut at 100 characters.
      const unknown = await call("POST", "/v1/sessions", { agent: { ...AGENT, ...manyKeys(5_000) } });
      expectError(unknown, 400, "invalid_request");
      expect(unknown.json.error.field).toBe("agent.k0");
      expect(unknown.json.error.message).toBe(
        'agent.k0: unknown field; also unknown: "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9", "k10" and 4,989 more',
      );
      const longKey = await call("POST", "/v1/sessions", { agent: AGENT, ["y".repeat(1_000_000)]: 1 });
      expectError(longKey, 400, "invalid_request");
      expect(longKey.json.error.message).toBe(`["${"y".repeat(100)}…"]: unknown field`);
      // Metadata of as many keys as its 64 KiB holds is accepted, as before.
      const ok = await call("POST", "/v1/sessions", {
        agent: AGENT,
        metadata: Object.fromEntries(Array.from({ length: 7_000 }, (_, i) => [i.toString(36), 1])),
      });
      expect(ok.status, ok.text).toBe(201);
      expect(await countSessions()).toBe(before + 1);
    });

    it("sizes: metadata over 64 KiB, an agent of 257 tools, 10,001 imported messages, 54,000 in one batch", async () => {
      const before = await countSessions();
      const big = await call("POST", "/v1/sessions", {
        agent: AGENT,
        metadata: { a: "x".repeat(64 * 1024) },
      });
      expectError(big, 400, "invalid_request");
      expect(big.json.error).toMatchObject({ field: "metadata", message: expect.stringMatching(/64 KiB/) });
      const notObject = await call("POST", "/v1/sessions", { agent: AGENT, metadata: [1] });
      expect(notObject.json.error).toMatchObject({
        field: "metadata",
        message: expect.stringMatching(/object/),
      });
      const tools = await call("POST", "/v1/sessions", {
        agent: { ...AGENT, tools: Array.from({ length: 257 }, (_, i) => `t${i}`) },
      });
      expect(tools.json.error).toMatchObject({
        field: "agent.tools",
        message: expect.stringMatching(/257|256/),
      });
      const said = (n: number) => Array.from({ length: n }, () => ({ role: "user", content: "x" }));
      const long = await call("POST", "/v1/sessions", { agent: AGENT, messages: said(10_001) });
      expect(long.json.error).toMatchObject({ field: "messages", message: expect.stringMatching(/10,000/) });
      const batch = await call("POST", "/v1/batches", {
        sessions: Array.from({ length: 6 }, () => ({ agent: AGENT, messages: said(9_000) })),
      });
      expectError(batch, 400, "invalid_request");
      expect(batch.json.error).toMatchObject({
        field: "sessions",
        message: expect.stringMatching(/54,000.*50,000/),
      });
      expect(await countSessions()).toBe(before);
      // At the limits, accepted.
      const ok = await call("POST", "/v1/sessions", {
        agent: AGENT,
        metadata: { a: "x".repeat(64 * 1024 - 10) },
        messages: said(10_000),
      });
      expect(ok.status, ok.text).toBe(201);
    });

    it("tool calls per step: more than 1,000 in an imported step or a scripted one is a 400; a budget past a Postgres integer too", async () => {
      const before = await countSessions();
      const calls = (n: number) =>
        Array.from({ length: n }, (_, i) => ({ id: `c${i}`, name: "x", arguments: {} }));
      const step = (n: number) => ({
        role: "assistant",
        content: "",
        stopReason: "tool_use",
        toolCalls: calls(n),
      });
      const imported = await call("POST", "/v1/sessions", {
        agent: AGENT,
        messages: [{ role: "user", content: "hi" }, step(1_001)],
      });
      expectError(imported, 400, "invalid_request");
      expect(imported.json.error).toMatchObject({
        field: "messages[1].toolCalls",
        message: expect.stringMatching(/1000 tool calls/),
      });
      const scripted = await call("POST", "/v1/sessions", {
        agent: { model: { provider: "scripted", steps: [{ toolCalls: calls(1_001) }] } },
      });
      expectError(scripted, 400, "invalid_request");
      expect(scripted.json.error.field).toBe("agent.model.steps[0].toolCalls");
      const budget = await call("POST", "/v1/sessions", {
        agent: { ...AGENT, budget: { maxModelCalls: 3_000_000_000 } },
      });
      expectError(budget, 400, "invalid_request");
      expect(budget.json.error).toMatchObject({
        field: "agent.budget.maxModelCalls",
        message: expect.stringMatching(/2147483647/),
      });
      expect(await countSessions()).toBe(before);
      // At the bounds, accepted: a step of 1,000 calls, all answered, and the largest budget.
      const answered = calls(1_000).map((c) => ({
        role: "tool",
        toolCallId: c.id,
        name: "x",
        content: "ok",
        success: true,
      }));
      const full = await call("POST", "/v1/sessions", {
        agent: { ...AGENT, budget: { maxModelCalls: 2_147_483_647 } },
        messages: [{ role: "user", content: "hi" }, step(1_000), ...answered],
      });
      expect(full.status, full.text).toBe(201);
      const point = await call("GET", `/v1/sessions/${full.json.id}/resume-point`);
      expect(point.json).toMatchObject({ resumable: true, kind: "call_model" });
    });

    it("a query parameter holding U+0000 is a 400 naming it, not a 500 from Postgres", async () => {
      // (Percent-encoded bytes that are not UTF-8, such as a lone surrogate's, stay as they were sent.)
      for (const query of ["batch=%00", "parkedReason=%00x", "status=active&batch=a%00b"]) {
        const answer = await call("GET", `/v1/sessions?${query}`);
        expectError(answer, 400, "invalid_request");
        expect(answer.json.error.field, query).toMatch(/^(batch|parkedReason)$/);
      }
      const named = await call("GET", "/v1/sessions?a%00=1");
      expectError(named, 400, "invalid_request");
      const fine = await call("GET", "/v1/sessions?batch=nope");
      expect(fine.status).toBe(200);
    });

    it("a DELETE refuses a query parameter (it reads none), deleting nothing: `DELETE …?dryRun=true`", async () => {
      const { id } = await client.createSession({ agent: AGENT });
      await client.send(id, "go");
      const batch = await client.createBatch([{ agent: AGENT, input: "go" }]);
      const before = await countSessions();
      for (const path of [`/v1/sessions/${id}?dryRun=true`, `/v1/batches/${batch.id}?dryRun=1&force`]) {
        // Before, the query was ignored: the session (the batch and its sessions) deleted, 200.
        const answer = await call("DELETE", path);
        expectError(answer, 400, "invalid_request");
        expect(answer.json.error, path).toEqual({
          code: "invalid_request",
          field: "dryRun",
          message: `dryRun: a DELETE takes no query parameters; DELETE ${path.split("?")[0]} reads only its path (and no body or {})`,
        });
      }
      expect(await countSessions()).toBe(before);
      expect((await client.getSession(id)).status).toBe("queued");
      expect((await client.getBatch(batch.id)).status).toBe("running");
      expect((await call("DELETE", `/v1/sessions/${id}`)).status).toBe(200);
      expect((await call("DELETE", `/v1/batches/${batch.id}`)).status).toBe(200);
    });

    it("a parkedReason filter no session can be parked for is a 400 naming the reasons, not an empty list", async () => {
      for (const reason of ["attemps_exhausted", "failed", "", "attempts_exhausted:3", "refused: "]) {
        const answer = await call("GET", `/v1/sessions?parkedReason=${encodeURIComponent(reason)}`);
        expectError(answer, 400, "invalid_request");
        expect([answer.json.error.field, answer.json.error.message], reason).toEqual([
          "parkedReason",
          expect.stringMatching(/^parkedReason: must be a parked reason /),
        ]);
      }
      const typo = await call("GET", "/v1/sessions?status=parked&parkedReason=attemps_exhausted");
      expect(typo.json.error.message).toContain("attempts_exhausted, max_output, paused, invalid_agent,");
      expect(typo.json.error.message).toContain('"attemps_exhausted" is none');
      // Only a parked session has one: with another status the filter is refused too.
      const active = await call("GET", "/v1/sessions?status=active&parkedReason=refused");
      expectError(active, 400, "invalid_request");
      expect(active.json.error).toMatchObject({
        field: "parkedReason",
        message:
          "parkedReason: only parked sessions have one, so with status=active it matches nothing: give status=parked or no status",
      });
      expect((await call("GET", "/v1/sessions?status=parked&parkedReason=refused")).status).toBe(200);
      // A known reason, alone or with its detail as a session shows it (U+202E and all), is a filter.
      for (const reason of ["attempts_exhausted", "unknown_stop: end\u202eturn", "invalid_agent: a: b"]) {
        const answer = await call("GET", `/v1/sessions?parkedReason=${encodeURIComponent(reason)}`);
        expect(answer.status, reason).toBe(200);
      }
    });

    it("answers invalid JSON with 400 and no stack trace", async () => {
      const before = await countSessions();
      const answer = await call("POST", "/v1/sessions", undefined, '{"agent": {');
      expectError(answer, 400);
      expect(await countSessions()).toBe(before);
    });

    it("a body that is not sent as application/json is a 415 naming Content-Type, whatever its text", async () => {
      const before = await countSessions();
      // What fetch sends for a string body without a content-type: text/plain;charset=UTF-8.
      const plain = await readAnswer(
        await fetch(`${base}/v1/sessions`, { method: "POST", body: JSON.stringify({ agent: AGENT }) }),
      );
      expectError(plain, 415, "invalid_request");
      expect(plain.json.error.field).toBe("Content-Type");
      expect(plain.json.error.message).toMatch(/application\/json/);
      expect(plain.json.error.message).toContain("text/plain");
      const form = await readAnswer(
        await fetch(`${base}/v1/sessions/${UNKNOWN}/messages`, {
          method: "POST",
          headers: { "content-type": "application/x-www-form-urlencoded" },
          body: "content=hi",
        }),
      );
      expectError(form, 415, "invalid_request");
      expect(form.json.error.field).toBe("Content-Type");
      const large = await call("POST", "/v1/sessions", undefined, `{"a": "${"x".repeat(16 * 1024 * 1024)}"}`);
      expectError(large, 413, "invalid_request");
      expect(large.json.error.message).toMatch(/16 MiB/);
      expect(await countSessions()).toBe(before);
    });

    it("a compressed body is a 415 naming Content-Encoding, not read as JSON text", async () => {
      const before = await countSessions();
      const body = JSON.stringify({ agent: AGENT });
      for (const [encoding, bytes] of [
        ["gzip", gzipSync(body)],
        ["br", brotliCompressSync(body)],
        // Said compressed, sent plain: it was read as the JSON it happens to be (201).
        ["gzip", Buffer.from(body)],
      ] as const) {
        const answer = await readAnswer(
          await fetch(`${base}/v1/sessions`, {
            method: "POST",
            headers: { "content-type": "application/json", "content-encoding": encoding },
            body: bytes,
          }),
        );
        expectError(answer, 415, "invalid_request");
        expect(answer.json.error.field).toBe("Content-Encoding");
        expect(answer.json.error.message).toContain(encoding);
      }
      expect(await countSessions()).toBe(before);
      const identity = await readAnswer(
        await fetch(`${base}/v1/sessions`, {
          method: "POST",
          headers: { "content-type": "application/json", "content-encoding": "identity" },
          body,
        }),
      );
      expect(identity.status, identity.text).toBe(201);
    });

    it("a body that is not UTF-8, or says it is in another charset, is refused, not stored with U+FFFD", async () => {
      const before = await countSessions();
      // "café" in Latin-1: the é is the single byte 0xE9, no UTF-8 sequence. Decoded as UTF-8
      // it was stored as "caf\uFFFD" and answered 201.
      const latin1 = Buffer.concat([
        Buffer.from(`{"agent": ${JSON.stringify(AGENT)}, "metadata": {"name": "caf`),
        Buffer.from([0xe9]),
        Buffer.from(`"}}`),
      ]);
      const send = (contentType: string) =>
        fetch(`${base}/v1/sessions`, {
          method: "POST",
          headers: { "content-type": contentType },
          body: latin1,
        });
      const bytes = await readAnswer(await send("application/json"));
      expectError(bytes, 400, "invalid_request");
      expect(bytes.json.error.message).toMatch(/UTF-8/);
      for (const declared of ["application/json; charset=latin1", "application/json;charset=ISO-8859-1"]) {
        const answer = await readAnswer(await send(declared));
        expectError(answer, 415, "invalid_request");
        expect(answer.json.error.field).toBe("Content-Type");
        expect(answer.json.error.message).toMatch(/UTF-8/i);
      }
      expect(await countSessions()).toBe(before);
      // UTF-8 itself, said or not, is served as always.
      const utf8 = Buffer.from(`{"agent": ${JSON.stringify(AGENT)}, "metadata": {"name": "café"}}`);
      for (const declared of [
        "application/json",
        "application/json; charset=utf-8",
        'application/json; charset="UTF-8"',
      ]) {
        const made = await readAnswer(
          await fetch(`${base}/v1/sessions`, {
            method: "POST",
            headers: { "content-type": declared },
            body: utf8,
          }),
        );
        expect(made.status, made.text).toBe(201);
        expect((await client.getSession(made.json.id)).metadata).toEqual({ name: "café" });
      }
    });
  });

  describe("404s", () => {
    it("an over-long id or a path that is not percent-encoding is answered without the URL echoed", async () => {
      // Fastify's own words quoted the whole path back (8 KB for an 8,000-character id).
      const long = await call("GET", `/v1/sessions/${"x".repeat(8_000)}`);
      expectError(long, 414, "invalid_request");
      expect(long.json.error.message).toBe(
        "an id in the URL is longer than 100 characters: no session, run or batch id is",
      );
      const bad = await call("GET", `/v1/sessions/%zz${"y".repeat(5_000)}`);
      expectError(bad, 400, "invalid_request");
      expect(bad.json.error.message).toBe("the URL's path is not valid percent-encoding");
    });

    it("answers 404 for an unknown session on every session route", async () => {
      const answers = await Promise.all([
        call("GET", `/v1/sessions/${UNKNOWN}`),
        call("GET", `/v1/sessions/${UNKNOWN}/resume-point`),
        call("POST", `/v1/sessions/${UNKNOWN}/messages`, { content: "hello" }),
        call("POST", `/v1/sessions/${UNKNOWN}/resume`, {}),
      ]);
      for (const answer of answers) {
        expectError(answer, 404, "not_found");
        expect(answer.json.error.message).toContain(UNKNOWN);
      }
      const [runs] = await fleet.database.sql<{ n: number }[]>`
        select count(*)::int as n from runs where session_id = ${UNKNOWN}`;
      expect(runs!.n).toBe(0);
    });

    it("answers 404 for an unknown route", async () => {
      expectError(await call("GET", "/v1/nothing-here"), 404, "not_found");
    });
  });

  describe("success shapes", () => {
    it("creates (201 {id}), sends (202 {runId}) and reads back a session", async () => {
      const created = await call("POST", "/v1/sessions", { agent: AGENT, metadata: { team: "a" } });
      expect(created.status).toBe(201);
      expect(Object.keys(created.json)).toEqual(["id"]);
      expect(created.json.id).toMatch(/\S/);
      const { id } = created.json as { id: string };

      const sent = await call("POST", `/v1/sessions/${id}/messages`, { content: "hello" });
      expect(sent.status).toBe(202);
      expect(Object.keys(sent.json)).toEqual(["runId"]);
      const { runId } = sent.json as { runId: string };

      const queued = await call("GET", `/v1/sessions/${id}`);
      expect(queued.status).toBe(200);
      expect(queued.json).toMatchObject({ id, status: "queued", agent: { model: SCRIPTED }, messages: [] });
      expect(queued.json.runs).toEqual([
        expect.objectContaining({
          id: runId,
          kind: "run",
          resumeKind: null,
          trigger: "api",
          status: "queued",
          endedReason: null,
          startedAt: null,
          endedAt: null,
        }),
      ]);

      // A worker runs it; then every field is filled in.
      await fleet.spawnWorker();
      const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
      expect(run.endedReason).toBe("completed");
      const answer = await call("GET", `/v1/sessions/${id}`);
      expect(answer.status).toBe(200);
      const session = answer.json;
      expect(session).toMatchObject({ id, status: "completed", agent: { model: SCRIPTED } });
      expect(session.messages).toEqual([
        { role: "user", content: "hello", seq: 1, createdAt: expect.stringMatching(ISO) },
        {
          role: "assistant",
          content: "ok",
          stopReason: "end_turn",
          seq: 2,
          createdAt: expect.stringMatching(ISO),
          // contracts §13: `null` when the provider reports nothing (the scripted model).
          usage: null,
        },
      ]);
      expect(session.runs).toHaveLength(1);
      const [r] = session.runs;
      expect(r).toMatchObject({
        id: runId,
        kind: "run",
        resumeKind: null,
        trigger: "api",
        status: "ended",
        endedReason: "completed",
      });
      expect(r.startedAt).toMatch(ISO);
      expect(r.endedAt).toMatch(ISO);
      expect(Date.parse(r.endedAt)).toBeGreaterThanOrEqual(Date.parse(r.startedAt));
    });

    it("answers a resume with 202 {runId, kind}", async () => {
      const { id } = await client.createSession({
        // A worker runs in this file: the answer takes a while, so the second request
        // arrives while the first resume is still waiting or running, and joins it.
        agent: { model: { provider: "scripted", steps: [{ text: "here", delayMs: 1_500 }] } },
        messages: [{ role: "user", content: "are you there?" }],
      });
      const point = await call("GET", `/v1/sessions/${id}/resume-point`);
      expect(point.status).toBe(200);
      expect(point.json).toEqual({
        resumable: true,
        kind: "call_model",
        description: expect.any(String),
        unansweredToolCalls: [],
      });
      const answer = await call("POST", `/v1/sessions/${id}/resume`, {});
      expect(answer.status).toBe(202);
      expect(answer.json).toEqual({ runId: expect.any(String), kind: "call_model" });
      const again = await call("POST", `/v1/sessions/${id}/resume`);
      // A second request joins the resume while it waits; once a worker has started it, the
      // session is running (contracts §12). Which one depends on how fast the worker took it.
      if (again.status === 202) expect(again.json.runId).toBe(answer.json.runId);
      else expect([again.status, again.json.error.reason]).toEqual([409, "running"]);
    });

    it("GET /healthz answers 200 {ok:true}", async () => {
      const answer = await call("GET", "/healthz");
      expect(answer.status).toBe(200);
      expect(answer.json).toEqual({ ok: true });
    });

    it("GET /metrics is Prometheus text with the queue gauge and the refusal counter", async () => {
      const answer = await call("GET", "/metrics");
      expect(answer.status).toBe(200);
      expect(answer.contentType).toMatch(/text\/plain/);
      expect(answer.text).toMatch(/^# TYPE fleet_queue_jobs gauge$/m);
      expect(answer.text).toMatch(/^fleet_queue_jobs\{[^}]*queue="runs"[^}]*\} \d+/m);
      // The batch webhook deliveries' queue too.
      expect(answer.text).toMatch(/^fleet_queue_jobs\{[^}]*queue="webhooks"[^}]*state="delayed"[^}]*\} \d+/m);
      expect(answer.text).toMatch(/^# TYPE fleet_resume_refusals_total counter$/m);
    });
  });

  describe("409s: nothing to resume", () => {
    it("refuses to resume a completed imported session (409 reason completed) and counts it", async () => {
      const { id } = await client.createSession({
        agent: AGENT,
        messages: [
          { role: "user", content: "hi" },
          { role: "assistant", content: "hello", stopReason: "end_turn" },
        ],
      });
      const answer = await call("POST", `/v1/sessions/${id}/resume`, {});
      expectError(answer, 409, "not_resumable");
      expect(answer.json.error.reason).toBe("completed");
      const point = await call("GET", `/v1/sessions/${id}/resume-point`);
      expect(point.json).toEqual({ resumable: false, reason: "completed" });
      const metrics = await call("GET", "/metrics");
      expect(metrics.text).toMatch(/^fleet_resume_refusals_total\{[^}]*reason="completed"[^}]*\} [1-9]\d*$/m);
      const [runs] = await fleet.database.sql<{ n: number }[]>`
        select count(*)::int as n from runs where session_id = ${id}`;
      expect(runs!.n).toBe(0);
    });

    it("refuses to resume an empty session (409 reason empty)", async () => {
      const { id } = await client.createSession({ agent: AGENT });
      const answer = await call("POST", `/v1/sessions/${id}/resume`);
      expectError(answer, 409, "not_resumable");
      expect(answer.json.error.reason).toBe("empty");
    });

    it("stores a malformed import, reports it, and refuses new input with 409", async () => {
      const { id } = await client.createSession({
        agent: AGENT,
        messages: [
          { role: "user", content: "hi" },
          {
            role: "assistant",
            content: "",
            toolCalls: [{ id: "a", name: "write_file", arguments: { path: "x", content: "y" } }],
            stopReason: "tool_use",
          },
          { role: "tool", toolCallId: "zzz", name: "write_file", content: "wrote x", success: true },
        ],
      });
      const point = await call("GET", `/v1/sessions/${id}/resume-point`);
      expect(point.status).toBe(200);
      expect(point.json).toMatchObject({ resumable: false, reason: "malformed" });
      const sent = await call("POST", `/v1/sessions/${id}/messages`, { content: "try again" });
      expectError(sent, 409, "not_resumable");
      expect(sent.json.error.reason).toBe("malformed");
      const resumed = await call("POST", `/v1/sessions/${id}/resume`, {});
      expectError(resumed, 409, "not_resumable");
      expect(resumed.json.error.reason).toBe("malformed");
      const [runs] = await fleet.database.sql<{ n: number }[]>`
        select count(*)::int as n from runs where session_id = ${id}`;
      expect(runs!.n).toBe(0);
    });
  });
});
