/**
 * A declared endpoint's origin stays the operator's (issue "Trust boundaries"): the text a
 * tenant reads of a failed model request — a run's `error`, its session's parked reason —
 * names the endpoint by its name, never its origin, `host:port` or host name, nor another
 * origin its server quoted; the worker's "provider error" line keeps the message whole.
 * Against local HTTP servers standing in for an operator's internal endpoint.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { callModel } from "../src/worker/call-model.js";
import { withProviderErrorLog } from "../src/worker/models/logged-provider.js";
import { OpenAIModel } from "../src/worker/models/openai.js";
import type { ModelRequest } from "../src/worker/models/provider.js";
import { ANOTHER_HOST, tenantErrorText } from "../src/worker/models/tenant-error-text.js";

const INTERNAL = "http://llm-gw.corp.internal:8000";

/** Answers every request with `answer(path)`. */
async function server(
  answer: (path: string) => { status: number; headers?: Record<string, string>; body: string },
): Promise<{ port: number; close: () => Promise<void> }> {
  const http: Server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      const { status, headers, body } = answer(req.url ?? "");
      res.writeHead(status, { "content-type": "text/plain", ...headers });
      res.end(body);
    });
  });
  await new Promise<void>((resolve) => http.listen(0, "127.0.0.1", resolve));
  return {
    port: (http.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        http.closeAllConnections();
        http.close(() => resolve());
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

/** The step's error (what the run stores) and the "provider error" lines' errors (the operator's). */
async function failedStep(baseUrl: string, endpoint?: string): Promise<{ error: string; logged: string[] }> {
  const logged: string[] = [];
  const log = { warn: (fields: object) => logged.push(String((fields as { error: unknown }).error)) };
  const model = new OpenAIModel(
    { provider: "openai", model: "m", baseUrl, ...(endpoint === undefined ? {} : { endpoint }) },
    { keyless: true },
  );
  const step = await callModel(withProviderErrorLog(model, log, { runId: "r1" }), request(), {
    sleep: async () => {},
  });
  if (step.ok) throw new Error("the step was expected to fail");
  return { error: step.error, logged };
}

describe("a declared endpoint's origin in the errors tenants read", () => {
  let redirecting: Awaited<ReturnType<typeof server>>;
  let gateway: Awaited<ReturnType<typeof server>>;
  let bare: Awaited<ReturnType<typeof server>>;

  beforeAll(async () => {
    redirecting = await server(() => ({ status: 307, headers: { location: "/elsewhere" }, body: "" }));
    gateway = await server((path) => ({ status: 404, body: `404 page not found at ${INTERNAL}${path}` }));
    // A gateway (LiteLLM, say) whose upstream is away: it names it by address, without a scheme.
    bare = await server(() => ({
      status: 400,
      body: "litellm.APIConnectionError: Cannot connect to host 10.0.0.9:11434 ssl:default [Connect call failed ('10.0.0.9', 11434)]; retried ollama.corp.internal:11434",
    }));
  });
  afterAll(async () => {
    await Promise.all([redirecting?.close(), gateway?.close(), bare?.close()]);
  });

  it("a refused redirect of a declared endpoint names the endpoint, not its origin; the log keeps it", async () => {
    const host = `localhost:${redirecting.port}`;
    const { error, logged } = await failedStep(`http://${host}/v1`, "team-gw");
    // Before: "openai: HTTP 307 redirect to another path of http://localhost:PORT refused: …"
    expect(error).not.toContain(host);
    expect(error).not.toMatch(/localhost/i);
    expect(error).toContain('HTTP 307 redirect to another path of endpoint "team-gw" refused');
    expect(logged.length).toBeGreaterThan(0);
    for (const line of logged) expect(line).toContain(`http://${host}`);
  });

  it("another origin a declared endpoint's server quotes is not read by tenants either", async () => {
    const host = `127.0.0.1:${gateway.port}`;
    const { error, logged } = await failedStep(`http://${host}/v1`, "team-gw");
    expect(error).not.toContain("corp.internal");
    expect(error).not.toContain(host);
    expect(error).toContain(`404 page not found at ${ANOTHER_HOST}/v1/chat/completions`);
    for (const line of logged) expect(line).toContain(INTERNAL);
  });

  it("a host a declared endpoint's server names without a scheme is not read by tenants either", async () => {
    const host = `127.0.0.1:${bare.port}`;
    const { error, logged } = await failedStep(`http://${host}/v1`, "team-gw");
    // Before: "… Cannot connect to host 10.0.0.9:11434 ssl:default [Connect call failed ('10.0.0.9', 11434)]
    // … ollama.corp.internal:11434 …"
    expect(error).not.toContain("10.0.0.9");
    expect(error).not.toContain("corp.internal");
    expect(error).toContain(
      `Cannot connect to host ${ANOTHER_HOST} ssl:default [Connect call failed ('${ANOTHER_HOST}', 11434)]; retried ${ANOTHER_HOST}`,
    );
    for (const line of logged) expect(line).toContain("10.0.0.9:11434");
  });

  it("a raw baseUrl, which the tenant named itself, keeps its error as it was", async () => {
    const host = `127.0.0.1:${gateway.port}`;
    const { error } = await failedStep(`http://${host}/v1`);
    expect(error).toContain(INTERNAL);
  });

  it("the endpoint's host:port and host name, bare, read as the endpoint (pure)", () => {
    const info = { provider: "openai" as const, endpoint: "gw", host: "llm.internal:8443" };
    expect(
      tenantErrorText(
        "connect ECONNREFUSED llm.internal:8443; getaddrinfo ENOTFOUND llm.internal; see https://LLM.internal:8443/x and llm.internal.example",
        info,
      ),
    ).toBe(
      'connect ECONNREFUSED endpoint "gw"; getaddrinfo ENOTFOUND endpoint "gw"; see endpoint "gw"/x and llm.internal.example',
    );
    const v6 = { provider: "openai" as const, endpoint: "gw", host: "[fd00::5]:8000" };
    expect(tenantErrorText("refused by http://[fd00::5]:8000 and [fd00::5]", v6)).toBe(
      'refused by endpoint "gw" and endpoint "gw"',
    );
    // Hosts named without a scheme; a model's name, a version and a time are no hosts.
    expect(
      tenantErrorText(
        "upstream 10.1.2.3 and 10.1.2.3:80, [fd00::9]:11434, vllm-0.pool.internal:8000; gpt-4.1 at 12:30 on v1.2.3",
        info,
      ),
    ).toBe(
      `upstream ${ANOTHER_HOST} and ${ANOTHER_HOST}, ${ANOTHER_HOST}, ${ANOTHER_HOST}; gpt-4.1 at 12:30 on v1.2.3`,
    );
    expect(tenantErrorText("to http://10.0.0.5:8000", { host: "10.0.0.5:8000" })).toBe(
      "to http://10.0.0.5:8000",
    );
  });
});
