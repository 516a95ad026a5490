/**
 * contracts.md §11 end to end: keys go only where the operator sends them. The in-process API
 * and a real `fleet worker` child load the same FLEET_MODEL_ENDPOINTS and
 * FLEET_ALLOWED_BASE_URLS; local fake OpenAI servers record every request's headers. The
 * worker's OPENAI_API_KEY is a sentinel that must never reach any server.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetApiError, type FleetClient } from "../src/producer/client.js";
import { type ModelConfig, parseAgentConfig, parseModelConfig } from "../src/shared/agent-config.js";
import { RunQueues } from "../src/shared/queues.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { type FakeOpenAI, startFakeOpenAI } from "./support/fake-openai.js";
import { createFleetEnv, type FleetEnv, type WorkerProcess } from "./support/fleet-env.js";

const SENTINEL = "sk-OPERATOR-SENTINEL-must-never-leave-0123456789";
const TEAM_KEY = "sk-team-key-for-the-declared-endpoint";
const RUN_TIMEOUT = { timeoutMs: 20_000 };

describe("model endpoints: keys go only where the operator sends them", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let worker: WorkerProcess;
  /** Declared as endpoint "team" with apiKeyEnv TEAM_KEY. */
  let declared: FakeOpenAI;
  /** Under FLEET_ALLOWED_BASE_URLS (this port only), and declared as endpoint "local" with no key. */
  let raw: FakeOpenAI;
  /** Same host, another port: not allowed. Nothing may ever reach it. */
  let forbidden: FakeOpenAI;
  let forbiddenUrl: string;

  beforeAll(async () => {
    [declared, raw, forbidden] = await Promise.all([startFakeOpenAI(), startFakeOpenAI(), startFakeOpenAI()]);
    forbiddenUrl = forbidden.url;
    const rawPort = new URL(raw.url).port;
    fleet = await createFleetEnv("modelendpoints", {
      env: {
        FLEET_ALLOWED_BASE_URLS: `http://127.0.0.1:${rawPort}/v1`,
        FLEET_MODEL_ENDPOINTS: JSON.stringify({
          team: { provider: "openai", baseUrl: declared.url, apiKeyEnv: "TEAM_KEY" },
          local: { provider: "openai", baseUrl: raw.url },
        }),
      },
    });
    ({ client } = await fleet.startApi());
    // The keys are in the worker's environment only.
    worker = await fleet.spawnWorker({ OPENAI_API_KEY: SENTINEL, TEAM_KEY });
  });

  afterAll(async () => {
    try {
      for (const fake of [declared, raw, forbidden]) {
        for (const request of fake?.requests ?? []) expect(JSON.stringify(request)).not.toContain(SENTINEL);
      }
      expect(forbidden?.requests ?? []).toHaveLength(0);
      if (worker) {
        expect(worker.output()).not.toContain(SENTINEL);
        expect(worker.output()).not.toContain(TEAM_KEY);
      }
    } finally {
      await fleet?.close();
      await Promise.all([declared, raw, forbidden].map((fake) => fake?.close()));
    }
  });

  async function run(model: ModelConfig) {
    const { id } = await client.createSession({ agent: { model } });
    const { runId } = await client.send(id, "Hello?");
    return { id, run: await client.waitForRun(runId, RUN_TIMEOUT) };
  }

  async function badRequest(promise: Promise<unknown>): Promise<FleetApiError> {
    const error = await promise.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(FleetApiError);
    expect((error as FleetApiError).status).toBe(400);
    return error as FleetApiError;
  }

  it("(a) a declared endpoint with apiKeyEnv gets that key, and only that key", async () => {
    declared.enqueue({ text: ["From ", "the team endpoint"] });
    const { id, run: ended } = await run({ provider: "openai", model: "gpt-team", endpoint: "team" });
    expect(ended.endedReason).toBe("completed");
    expect(declared.requests).toHaveLength(1);
    expect(declared.requests[0]!.headers.authorization).toBe(`Bearer ${TEAM_KEY}`);
    expect(declared.requests[0]!.body.model).toBe("gpt-team");
    const stored = await client.getSession(id);
    expect(stored.messages.at(-1)).toMatchObject({ content: "From the team endpoint" });
    // The stored agent names the endpoint, never a URL or a key.
    expect(JSON.stringify(stored.agent)).not.toContain(TEAM_KEY);
  });

  it("(a') a declared endpoint with a baseUrl and no apiKeyEnv gets no key", async () => {
    raw.enqueue({ text: ["local"] });
    const before = raw.requests.length;
    const { run: ended } = await run({ provider: "openai", model: "llama", endpoint: "local" });
    expect(ended.endedReason).toBe("completed");
    expect(raw.requests).toHaveLength(before + 1);
    expect(raw.requests.at(-1)!.headers.authorization).toBe("Bearer no-key");
  });

  it("(b) a raw allowed baseUrl gets no key from the worker's environment", async () => {
    raw.enqueue({ text: ["raw ", "answer"] });
    const before = raw.requests.length;
    const { run: ended } = await run({ provider: "openai", model: "llama", baseUrl: raw.url });
    expect(ended.endedReason).toBe("completed");
    expect(raw.requests).toHaveLength(before + 1);
    const headers = raw.requests.at(-1)!.headers;
    expect(headers.authorization).toBe("Bearer no-key");
    expect(JSON.stringify(headers)).not.toContain(SENTINEL);
    expect(JSON.stringify(headers)).not.toContain(TEAM_KEY);
  });

  it("(c) a baseUrl not allowed, or an unknown endpoint, is a 400 naming the field; nothing is sent or stored", async () => {
    const before = (await client.listSessions()).sessions.length;
    const disallowed: ModelConfig = { provider: "openai", model: "m", baseUrl: forbiddenUrl };

    const create = await badRequest(client.createSession({ agent: { model: disallowed } }));
    expect(create.field).toBe("agent.model.baseUrl");
    expect(create.message).toMatch(/FLEET_ALLOWED_BASE_URLS/);

    // A host that merely starts with an allowed entry's text.
    const lookalike = await badRequest(
      client.createSession({
        agent: {
          model: { provider: "openai", model: "m", baseUrl: `${raw.url.replace("/v1", "")}.evil.com/v1` },
        },
      }),
    );
    expect(lookalike.field).toBe("agent.model.baseUrl");

    const anthropic = await badRequest(
      client.createSession({
        agent: { model: { provider: "anthropic", model: "m", baseUrl: forbiddenUrl } },
      }),
    );
    expect(anthropic.field).toBe("agent.model.baseUrl");

    const fallback = await badRequest(
      client.createSession({
        agent: { model: { provider: "openai", model: "m", endpoint: "team" }, fallbackModels: [disallowed] },
      }),
    );
    expect(fallback.field).toBe("agent.fallbackModels[0].baseUrl");

    const unknown = await badRequest(
      client.createSession({ agent: { model: { provider: "openai", model: "m", endpoint: "nope" } } }),
    );
    expect(unknown.field).toBe("agent.model.endpoint");

    const wrongProvider = await badRequest(
      client.createSession({ agent: { model: { provider: "anthropic", model: "m", endpoint: "team" } } }),
    );
    expect(wrongProvider.field).toBe("agent.model.endpoint");

    const batch = await badRequest(
      client.createBatch([
        { agent: { model: { provider: "openai", model: "m", endpoint: "team" } }, input: "hi" },
        { agent: { model: disallowed }, input: "hi" },
      ]),
    );
    expect(batch.field).toBe("sessions[1].agent.model.baseUrl");
    expect((await client.listSessions()).sessions).toHaveLength(before);

    // The resume body's model.
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "hi" }] } },
      messages: [{ role: "user", content: "Hello?" }],
    });
    const resume = await badRequest(client.resume(id, { model: disallowed }));
    expect(resume.field).toBe("model.baseUrl");
    const resumeUnknown = await badRequest(
      client.resume(id, { model: { provider: "openai", model: "m", endpoint: "nope" } }),
    );
    expect(resumeUnknown.field).toBe("model.endpoint");
    expect((await client.getSession(id)).runs).toHaveLength(0);

    expect(forbidden.requests).toHaveLength(0);
  });

  it("(d) a stored agent with a baseUrl not allowed (bypassing the API) parks invalid_agent; nothing is sent", async () => {
    const queries = new SessionQueries(fleet.database);
    // Valid by the MODEL schema (as an agent stored before the rule would be), never routed.
    const { id } = await queries.createSession({
      agent: parseAgentConfig({ model: { provider: "openai", model: "m", baseUrl: forbiddenUrl } }),
      messages: [],
    });
    const { runId } = await client.send(id, "Hello?");
    const ended = await client.waitForRun(runId, RUN_TIMEOUT);
    expect(ended.endedReason).toBe("invalid_agent");
    expect(ended.error).toMatch(/agent\.model\.baseUrl/);
    const stored = await client.getSession(id);
    expect(stored.status).toBe("parked");
    expect(stored.parkedReason).toMatch(/^invalid_agent: agent\.model\.baseUrl: /);
    expect(stored.messages.map((m) => m.role)).toEqual(["user"]);
    expect(forbidden.requests).toHaveLength(0);
  });

  it("(d') a resume asking for a model stored before the rule parks invalid_agent naming run.model; nothing is sent", async () => {
    // A queued resume whose model was stored without the API's check (e.g. by an older version).
    const queries = new SessionQueries(fleet.database);
    const { id } = await queries.createSession({
      agent: parseAgentConfig({ model: { provider: "scripted", steps: [{ text: "hi" }] } }),
      messages: [{ role: "user", content: "Hello?" }],
    });
    const { run } = await queries.createRun({
      sessionId: id,
      kind: "resume",
      trigger: "api",
      resumeKind: "call_model",
      model: parseModelConfig({ provider: "openai", model: "m", baseUrl: forbiddenUrl }),
    });
    const queues = new RunQueues(fleet.redis, fleet.config.prefix);
    try {
      await queues.enqueue("resume", { sessionId: id, runId: run.id });
    } finally {
      await queues.close();
    }
    const ended = await client.waitForRun(run.id, RUN_TIMEOUT);
    expect(ended.endedReason).toBe("invalid_agent");
    expect(ended.error).toMatch(/^run\.model\.baseUrl: /);
    expect((await client.getSession(id)).status).toBe("parked");
    expect(forbidden.requests).toHaveLength(0);
  });
});
