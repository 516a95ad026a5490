/**
 * Keys never leave for another host (issue "Trust boundaries"; contracts §11), against local
 * HTTP servers standing in for providers:
 *
 * - A provider endpoint that answers 307/302 pointing at a second server (another port:
 *   another origin) — both providers, a declared endpoint with its key and a raw allowed
 *   baseUrl: the second server never sees a request, the request fails once, non-retryably,
 *   with an error naming the status and the Location's origin. At the provider level and
 *   through a real `fleet worker` child process.
 * - With every credential variable the SDKs read by themselves set in the worker's
 *   environment (OPENAI_API_KEY, OPENAI_ADMIN_KEY, OPENAI_ORG_ID, OPENAI_PROJECT_ID,
 *   ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN, OPENAI_CUSTOM_HEADERS, ANTHROPIC_CUSTOM_HEADERS,
 *   the base URL variables), a raw-baseUrl server sees none of them in any header, and a
 *   declared endpoint sees only its own key.
 */
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import type { ModelConfig } from "../src/shared/agent-config.js";
import { callModel } from "../src/worker/call-model.js";
import { AnthropicModel } from "../src/worker/models/anthropic.js";
import { OpenAIModel } from "../src/worker/models/openai.js";
import { type ModelProvider, type ModelRequest, ProviderError } from "../src/worker/models/provider.js";
import { ANOTHER_HOST } from "../src/worker/models/tenant-error-text.js";
import { type FakeAnthropic, startFakeAnthropic } from "./support/fake-anthropic.js";
import { type FakeOpenAI, startFakeOpenAI } from "./support/fake-openai.js";
import { createFleetEnv, type FleetEnv, type WorkerProcess } from "./support/fleet-env.js";

const TEAM_KEY = "sk-team-REDIRECT-SECRET-0123456789";
const RUN_TIMEOUT = { timeoutMs: 20_000 };

type Seen = { method: string; path: string; headers: IncomingMessage["headers"] };

/** A server that records every request and answers each with `answer`. */
async function recordingServer(
  answer: (seen: Seen) => { status: number; headers?: Record<string, string>; body?: string },
): Promise<{ url: string; origin: string; seen: Seen[]; close: () => Promise<void> }> {
  const seen: Seen[] = [];
  const server: Server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      const entry = { method: req.method ?? "", path: req.url ?? "", headers: req.headers };
      seen.push(entry);
      const { status, headers, body } = answer(entry);
      res.writeHead(status, { "content-type": "application/json", ...headers });
      res.end(body ?? "");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  const origin = `http://127.0.0.1:${port}`;
  return {
    url: origin,
    origin,
    seen,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

function request(): ModelRequest {
  return {
    sessionId: "s1",
    history: [{ role: "user", content: "hi" }],
    tools: [],
    signal: new AbortController().signal,
  };
}

async function failure(provider: ModelProvider): Promise<ProviderError> {
  const error = await (async () => {
    for await (const _ of provider.stream(request())) {
      // nothing may arrive
    }
  })().then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ProviderError);
  return error as ProviderError;
}

describe("redirects are never followed (provider level)", () => {
  /** The other origin a redirect points at: nothing may ever reach it. */
  let target: Awaited<ReturnType<typeof recordingServer>>;
  /** Answers every request with a redirect to `target` (status from the path's first segment). */
  let redirector: Awaited<ReturnType<typeof recordingServer>>;
  let status = 307;

  beforeAll(async () => {
    target = await recordingServer(() => ({ status: 500, body: '{"error":{"message":"reached"}}' }));
    redirector = await recordingServer((seen) => ({
      status,
      headers: { location: `${target.url}${seen.path}?token=sk-in-the-location-0123456789` },
    }));
  });
  afterAll(async () => {
    await Promise.all([target?.close(), redirector?.close()]);
  });

  const providers: [string, (baseUrl: string) => ModelProvider, string][] = [
    [
      "openai",
      (baseUrl) => new OpenAIModel({ provider: "openai", model: "m", baseUrl }, { apiKey: TEAM_KEY }),
      "/v1",
    ],
    [
      "anthropic",
      (baseUrl) => new AnthropicModel({ provider: "anthropic", model: "m", baseUrl }, { apiKey: TEAM_KEY }),
      "",
    ],
  ];

  for (const [name, build, path] of providers) {
    for (const code of [307, 302, 301, 308]) {
      it(`${name}: ${code} to another origin → one request, a non-retryable error naming the status and the origin`, async () => {
        status = code;
        const before = redirector.seen.length;
        const error = await failure(build(`${redirector.url}${path}`));
        expect(error.retryable).toBe(false);
        expect(error.message).toContain(`HTTP ${code} redirect to ${target.origin} refused`);
        // Only the origin of the Location: neither its path nor its query.
        expect(error.message).not.toContain("token=");
        expect(error.message).not.toContain(TEAM_KEY);
        expect(error.info).toMatchObject({
          provider: name,
          status: code,
          host: new URL(redirector.url).host,
        });
        expect(redirector.seen.length).toBe(before + 1);
        expect(target.seen).toHaveLength(0);
      });
    }

    it(`${name}: through callModel the step fails after one attempt (not retried)`, async () => {
      status = 307;
      const before = redirector.seen.length;
      const slept: number[] = [];
      const step = await callModel(build(`${redirector.url}${path}`), request(), {
        sleep: async (ms) => {
          slept.push(ms);
        },
      });
      expect(step).toMatchObject({ ok: false, aborted: false, attempts: 1 });
      expect(slept).toEqual([]);
      expect(redirector.seen.length).toBe(before + 1);
      expect(target.seen).toHaveLength(0);
    });

    it(`${name}: a redirect to another path of the same origin is refused too`, async () => {
      const same = await recordingServer(() => ({ status: 307, headers: { location: "/elsewhere" } }));
      try {
        const error = await failure(build(`${same.url}${path}`));
        expect(error.retryable).toBe(false);
        expect(error.message).toContain(`HTTP 307 redirect to another path of ${same.origin} refused`);
        expect(same.seen).toHaveLength(1);
      } finally {
        await same.close();
      }
    });
  }
});

describe("through a worker process: redirects, and no credential from the environment", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let worker: WorkerProcess;
  let target: Awaited<ReturnType<typeof recordingServer>>;
  let redirector: Awaited<ReturnType<typeof recordingServer>>;
  /** A raw allowed baseUrl (OpenAI protocol), and a declared endpoint with TEAM_KEY. */
  let rawOpenAI: FakeOpenAI;
  let declaredOpenAI: FakeOpenAI;
  /** The same for the Anthropic protocol. */
  let rawAnthropic: FakeAnthropic;
  let declaredAnthropic: FakeAnthropic;

  /** Every value the SDKs could pick up from the environment by themselves. */
  const ENV_SENTINELS: Record<string, string> = {
    OPENAI_API_KEY: "sk-env-OPENAI-API-KEY-sentinel-0001",
    OPENAI_ADMIN_KEY: "sk-env-OPENAI-ADMIN-KEY-sentinel-0002",
    OPENAI_ORG_ID: "org-env-OPENAI-ORG-ID-sentinel-0003",
    OPENAI_PROJECT_ID: "proj-env-OPENAI-PROJECT-ID-sentinel-0004",
    ANTHROPIC_API_KEY: "sk-ant-env-ANTHROPIC-API-KEY-sentinel-0005",
    ANTHROPIC_AUTH_TOKEN: "env-ANTHROPIC-AUTH-TOKEN-sentinel-0006",
  };
  const HEADER_SENTINEL = "env-CUSTOM-HEADER-sentinel-0007";
  const ENV: Record<string, string> = {
    ...ENV_SENTINELS,
    OPENAI_CUSTOM_HEADERS: `X-Env-Secret: ${HEADER_SENTINEL}\nAuthorization: Bearer ${HEADER_SENTINEL}`,
    ANTHROPIC_CUSTOM_HEADERS: `X-Env-Secret: ${HEADER_SENTINEL}\nX-Api-Key: ${HEADER_SENTINEL}\nAuthorization: Bearer ${HEADER_SENTINEL}`,
    // Where the SDKs would go by themselves: nothing may go there either.
    OPENAI_BASE_URL: "http://127.0.0.1:9/v1",
    ANTHROPIC_BASE_URL: "http://127.0.0.1:9",
    TEAM_KEY,
  };
  const ALL_SENTINELS = [...Object.values(ENV_SENTINELS), HEADER_SENTINEL];

  beforeAll(async () => {
    target = await recordingServer(() => ({ status: 500, body: '{"error":{"message":"reached"}}' }));
    redirector = await recordingServer((seen) => ({
      status: seen.path.startsWith("/v1/messages") ? 302 : 307,
      headers: { location: `${target.url}${seen.path}` },
    }));
    [rawOpenAI, declaredOpenAI, rawAnthropic, declaredAnthropic] = await Promise.all([
      startFakeOpenAI(),
      startFakeOpenAI(),
      startFakeAnthropic(),
      startFakeAnthropic(),
    ]);
    const port = (url: string) => new URL(url).port;
    fleet = await createFleetEnv("providerredirects", {
      env: {
        FLEET_ALLOWED_BASE_URLS: [redirector.url, rawOpenAI.url, rawAnthropic.url]
          .map((u) => `http://127.0.0.1:${port(u)}`)
          .join(","),
        FLEET_MODEL_ENDPOINTS: JSON.stringify({
          "redirect-openai": { provider: "openai", baseUrl: `${redirector.url}/v1`, apiKeyEnv: "TEAM_KEY" },
          "redirect-anthropic": { provider: "anthropic", baseUrl: redirector.url, apiKeyEnv: "TEAM_KEY" },
          "team-openai": { provider: "openai", baseUrl: declaredOpenAI.url, apiKeyEnv: "TEAM_KEY" },
          "team-anthropic": { provider: "anthropic", baseUrl: declaredAnthropic.url, apiKeyEnv: "TEAM_KEY" },
        }),
      },
    });
    ({ client } = await fleet.startApi());
    worker = await fleet.spawnWorker(ENV);
  });

  afterAll(async () => {
    try {
      expect(target?.seen ?? []).toHaveLength(0);
      if (worker)
        for (const secret of [...ALL_SENTINELS, TEAM_KEY]) expect(worker.output()).not.toContain(secret);
    } finally {
      await fleet?.close();
      await Promise.all(
        [target, redirector, rawOpenAI, declaredOpenAI, rawAnthropic, declaredAnthropic].map((s) =>
          s?.close(),
        ),
      );
    }
  });

  async function run(model: ModelConfig) {
    const { id } = await client.createSession({ agent: { model } });
    const { runId } = await client.send(id, "Hello?");
    return { id, run: await client.waitForRun(runId, RUN_TIMEOUT) };
  }

  const redirected: [string, () => ModelConfig, number][] = [
    [
      "openai, declared endpoint with a key",
      () => ({ provider: "openai", model: "m", endpoint: "redirect-openai" }),
      307,
    ],
    [
      "anthropic, declared endpoint with a key",
      () => ({ provider: "anthropic", model: "m", endpoint: "redirect-anthropic" }),
      302,
    ],
    [
      "openai, raw allowed baseUrl",
      () => ({ provider: "openai", model: "m", baseUrl: `${redirector.url}/v1` }),
      307,
    ],
    [
      "anthropic, raw allowed baseUrl",
      () => ({ provider: "anthropic", model: "m", baseUrl: redirector.url }),
      302,
    ],
  ];
  for (const [name, model, code] of redirected) {
    it(`${name}: the redirect is refused, the run ends provider_error after one request`, async () => {
      const before = redirector.seen.length;
      const { id, run: ended } = await run(model());
      expect(ended.endedReason).toBe("provider_error");
      // A declared endpoint's error, as its tenant reads it, names no origin of the operator's
      // network (tenant-error-text.ts); a raw baseUrl's names what its tenant named.
      const declared = name.includes("declared");
      const where = declared ? ANOTHER_HOST : target.origin;
      expect(ended.error).toContain(`HTTP ${code} redirect to ${where} refused`);
      expect(ended.error).not.toContain(TEAM_KEY);
      if (declared) {
        const parked = (await client.getSession(id)).parkedReason ?? "";
        for (const text of [ended.error ?? "", parked])
          for (const origin of [target.origin, redirector.origin])
            expect(text).not.toContain(new URL(origin).host);
      }
      // One request: a redirect is not retried.
      expect(redirector.seen.length).toBe(before + 1);
      expect(target.seen).toHaveLength(0);
    });
  }

  it("the key went to the redirecting endpoint it was declared for, and nowhere else", () => {
    const keyed = redirector.seen.filter((s) => JSON.stringify(s.headers).includes(TEAM_KEY));
    // The two declared-endpoint runs carried the key; the raw-baseUrl runs did not.
    expect(keyed).toHaveLength(2);
    for (const seen of redirector.seen)
      for (const secret of ALL_SENTINELS) expect(JSON.stringify(seen.headers)).not.toContain(secret);
  });

  it("openai: a raw baseUrl sees no credential from the environment in any header", async () => {
    rawOpenAI.enqueue({ text: ["raw ", "answer"] });
    const { run: ended } = await run({ provider: "openai", model: "llama", baseUrl: rawOpenAI.url });
    expect(ended.endedReason).toBe("completed");
    expect(rawOpenAI.requests).toHaveLength(1);
    const headers = rawOpenAI.requests[0]!.headers;
    expect(headers.authorization).toBe("Bearer no-key");
    expect(headers["x-env-secret"]).toBeUndefined();
    expect(headers["openai-organization"]).toBeUndefined();
    expect(headers["openai-project"]).toBeUndefined();
    for (const secret of [...ALL_SENTINELS, TEAM_KEY]) expect(JSON.stringify(headers)).not.toContain(secret);
  });

  it("anthropic: a raw baseUrl sees no credential from the environment in any header", async () => {
    rawAnthropic.script({ blocks: [{ type: "text", text: "raw answer" }] });
    const { run: ended } = await run({ provider: "anthropic", model: "claude", baseUrl: rawAnthropic.url });
    expect(ended.endedReason).toBe("completed");
    expect(rawAnthropic.requests).toHaveLength(1);
    const headers = rawAnthropic.requests[0]!.headers;
    expect(headers.authorization).toBe("Bearer no-key");
    expect(headers["x-api-key"]).toBeUndefined();
    expect(headers["x-env-secret"]).toBeUndefined();
    expect(headers["anthropic-version"]).toMatch(/\S/);
    for (const secret of [...ALL_SENTINELS, TEAM_KEY]) expect(JSON.stringify(headers)).not.toContain(secret);
  });

  it("a declared endpoint sees its own key and nothing else from the environment", async () => {
    declaredOpenAI.enqueue({ text: ["team"] });
    declaredAnthropic.script({ blocks: [{ type: "text", text: "team" }] });
    const openai = await run({ provider: "openai", model: "gpt", endpoint: "team-openai" });
    const anthropic = await run({ provider: "anthropic", model: "claude", endpoint: "team-anthropic" });
    expect([openai.run.endedReason, anthropic.run.endedReason]).toEqual(["completed", "completed"]);
    for (const fake of [declaredOpenAI, declaredAnthropic]) {
      expect(fake.requests).toHaveLength(1);
      const headers = fake.requests[0]!.headers;
      expect(headers.authorization).toBe(`Bearer ${TEAM_KEY}`);
      expect(headers["x-env-secret"]).toBeUndefined();
      expect(headers["x-api-key"]).toBeUndefined();
      for (const secret of ALL_SENTINELS) expect(JSON.stringify(headers)).not.toContain(secret);
    }
  });
});
