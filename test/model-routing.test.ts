/**
 * contracts.md §11, pure: FLEET_ALLOWED_BASE_URLS prefix matching on parsed URLs (the tricky
 * cases a string `startsWith` gets wrong), FLEET_MODEL_ENDPOINTS validation naming the entry,
 * and the route — base URL and key — each MODEL gets, with errors naming the field.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { type ModelConfig, parseAgentConfig, parseModelConfig } from "../src/shared/agent-config.js";
import {
  isAllowedBaseUrl,
  parseAllowedBaseUrl,
  parseAllowedBaseUrls,
} from "../src/shared/allowed-base-urls.js";
import { loadConfig } from "../src/shared/config.js";
import { ValidationError } from "../src/shared/errors.js";
import {
  checkAgentModels,
  type ModelRouting,
  parseModelEndpoints,
  resolveModelRoute,
} from "../src/shared/model-endpoints.js";
import { createModel } from "../src/worker/models/create-model.js";

function allowed(entries: string): (url: string) => boolean {
  const list = parseAllowedBaseUrls(entries);
  return (url) => isAllowedBaseUrl(url, list);
}

function validationError(fn: () => unknown): ValidationError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(ValidationError);
    return error as ValidationError;
  }
  throw new Error("expected a ValidationError");
}

describe("FLEET_ALLOWED_BASE_URLS prefix matching", () => {
  it("an entry without a port admits its host on any port, and nothing that merely starts with its text", () => {
    const ok = allowed("http://127.0.0.1");
    expect(ok("http://127.0.0.1")).toBe(true);
    expect(ok("http://127.0.0.1/v1")).toBe(true);
    expect(ok("http://127.0.0.1:8080/v1")).toBe(true);
    // A string prefix, another host:
    expect(ok("http://127.0.0.1.evil.com/v1")).toBe(false);
    expect(ok("http://127.0.0.1.nip.io:8080/v1")).toBe(false);
    // User info: the host is evil.com.
    expect(ok("http://127.0.0.1@evil.com/v1")).toBe(false);
    expect(ok("http://127.0.0.1:8080@evil.com/v1")).toBe(false);
    // User info on the allowed host: refused (fetch would refuse it too).
    expect(ok("http://user:pw@127.0.0.1:8080/v1")).toBe(false);
    // Another scheme.
    expect(ok("https://127.0.0.1/v1")).toBe(false);
    expect(ok("file:///etc/passwd")).toBe(false);
    // A backslash ends the host for http(s), as fetch reads it: still 127.0.0.1.
    expect(ok("http://127.0.0.1\\@evil.com/v1")).toBe(true);
    expect(ok("http://evil.com\\@127.0.0.1/v1")).toBe(false);
    expect(ok("not a url")).toBe(false);
  });

  it("an entry with a port admits that port only; a default port counts as written", () => {
    const ok = allowed("http://127.0.0.1:8080, https://llm.example.com:443");
    expect(ok("http://127.0.0.1:8080/v1")).toBe(true);
    expect(ok("http://127.0.0.1:8081/v1")).toBe(false);
    expect(ok("http://127.0.0.1/v1")).toBe(false);
    expect(ok("https://llm.example.com/v1")).toBe(true);
    expect(ok("https://llm.example.com:8443/v1")).toBe(false);
    expect(parseAllowedBaseUrl("http://h:80").port).toBe("80");
    expect(parseAllowedBaseUrl("http://h").port).toBeNull();
    expect(parseAllowedBaseUrl("http://[::1]").port).toBeNull();
    expect(parseAllowedBaseUrl("http://[::1]:11434").port).toBe("11434");
    expect(allowed("http://[::1]:11434")("http://[::1]:11434/v1")).toBe(true);
    expect(allowed("http://[::1]:11434")("http://[::2]:11434/v1")).toBe(false);
  });

  it("an entry's port holds however many slashes follow its scheme (as the parser reads them)", () => {
    // The parser reads `http:/h:8080`, `http:h:8080` and `http:///h:8080` as `http://h:8080`;
    // the port was looked for only after exactly two slashes, so these admitted every port.
    for (const entry of [
      "http:/127.0.0.1:8080/v1",
      "http:127.0.0.1:8080/v1",
      "http:///127.0.0.1:8080/v1",
      "http:\\\\127.0.0.1:8080/v1",
      "http://127.0.0.1:80\t80/v1",
    ]) {
      expect(parseAllowedBaseUrl(entry).port, entry).toBe("8080");
      const ok = allowed(entry);
      expect(ok("http://127.0.0.1:8080/v1"), entry).toBe(true);
      expect(ok("http://127.0.0.1:6379/v1"), entry).toBe(false);
    }
    expect(parseAllowedBaseUrl("http:/127.0.0.1/v1").port).toBeNull();
    expect(parseAllowedBaseUrl("https:[::1]:443").port).toBe("443");
  });

  it("paths match at segment boundaries, after the parser resolved dot segments", () => {
    const ok = allowed("http://10.0.0.5:8000/v1");
    expect(ok("http://10.0.0.5:8000/v1")).toBe(true);
    expect(ok("http://10.0.0.5:8000/v1/")).toBe(true);
    expect(ok("http://10.0.0.5:8000/v1/chat")).toBe(true);
    expect(ok("http://10.0.0.5:8000/v10")).toBe(false);
    expect(ok("http://10.0.0.5:8000/v1-admin")).toBe(false);
    expect(ok("http://10.0.0.5:8000/")).toBe(false);
    expect(ok("http://10.0.0.5:8000/v1/../admin")).toBe(false);
    expect(ok("http://10.0.0.5:8000/v1/%2e%2e/admin")).toBe(false);
    expect(ok("http://10.0.0.5:8000/V1")).toBe(false);
    const slash = allowed("http://10.0.0.5:8000/v1/");
    expect(slash("http://10.0.0.5:8000/v1/x")).toBe(true);
    expect(slash("http://10.0.0.5:8000/v1")).toBe(false);
  });

  it("a path that climbs out of the prefix once the server decodes it is refused", () => {
    // The parser resolves `..` and `%2e%2e` segments, but leaves an encoded `/` or `\` as it is:
    // nginx decodes before resolving dot segments, so `/v1/..%2fadmin` reaches `/admin` there.
    const ok = allowed("http://10.0.0.5:8000/v1");
    for (const path of [
      "/v1/..%2fadmin",
      "/v1/..%2Fadmin",
      "/v1/%2e%2e%2fadmin",
      "/v1/%2E%2E%2Fadmin",
      "/v1/x/..%2f..%2fadmin",
      "/v1/..%5cadmin",
      "/v1/..%255cadmin", // encoded twice
      "/v1/%252e%252e%252fadmin",
      "/v1/..;/admin", // Tomcat drops `;` parameters before resolving
      "/v1/.;x/..;/admin",
      "/v1/%2e%2e;/admin",
      "/v1/%zz", // not percent-encoding at all
    ])
      expect(ok(`http://10.0.0.5:8000${path}`), path).toBe(false);
    for (const path of ["/v1/chat", "/v1/a%20b", "/v1/x;y", "/v1/.x", "/v1/...", "/v1/a..b", "/v1/%2e%2ex"])
      expect(ok(`http://10.0.0.5:8000${path}`), path).toBe(true);
    // Webhooks share the matching: FLEET_WEBHOOK_ALLOWED_URLS refuses them alike.
    expect(allowed("https://hooks.example.com/in")("https://hooks.example.com/in/..%2fadmin")).toBe(false);
  });

  it("hosts are compared as the parser normalises them", () => {
    const ok = allowed("http://LocalHost, http://127.0.0.1");
    expect(ok("http://localhost:3000/v1")).toBe(true);
    expect(ok("http://LOCALHOST/v1")).toBe(true);
    expect(ok("http://0x7f.0.0.1:8080/v1")).toBe(true); // the same address, written otherwise
    expect(ok("http://2130706433/v1")).toBe(true);
    expect(ok("http://localhost.evil.com/v1")).toBe(false);
    expect(ok("http://127.0.0.2/v1")).toBe(false);
  });

  it("no entries: nothing is allowed", () => {
    expect(allowed("")("http://127.0.0.1/v1")).toBe(false);
    expect(parseAllowedBaseUrls(undefined)).toEqual([]);
    expect(parseAllowedBaseUrls(" , ")).toEqual([]);
  });

  it("a bad entry is refused at start, naming it", () => {
    for (const [value, message] of [
      ["http://ok, ftp://h", /FLEET_ALLOWED_BASE_URLS\[1\]: "ftp:\/\/h" must be an http/],
      ["127.0.0.1:8080", /FLEET_ALLOWED_BASE_URLS\[0\]: .* (is not a URL|must be an http)/],
      ["http://u:p@h", /must not carry a user name/],
      ["http://h/v1?x=1", /query or a fragment/],
      ["http://h/v1#", /query or a fragment/],
    ] as const) {
      expect(() => loadConfig({ FLEET_ALLOWED_BASE_URLS: value })).toThrow(message);
    }
  });
});

describe("allow-list entries with a password", () => {
  it("are refused at start without the password: the error is a log line of every role", () => {
    for (const variable of ["FLEET_ALLOWED_BASE_URLS", "FLEET_WEBHOOK_ALLOWED_URLS"]) {
      for (const entry of ["http://gw-user:Pa55w0rd-allow@127.0.0.1:8080/v1", "https://Pa55w0rd-allow@h"]) {
        const error = validationError(() => loadConfig({ [variable]: `http://ok, ${entry}` }));
        expect(error.message).toMatch(new RegExp(`^${variable}\\[1\\]: .*must not carry a user name`));
        expect(error.message).not.toContain("Pa55w0rd");
      }
    }
  });
});

describe("FLEET_MODEL_ENDPOINTS", () => {
  const env = { TEAM_KEY: "sk-team", OPENAI_API_KEY: "sk-default", ANTHROPIC_API_KEY: "sk-ant" };

  it("parses entries: the provider's own host gets the provider's key, another host only the key it names", () => {
    const endpoints = parseModelEndpoints(
      JSON.stringify({
        openai: { provider: "openai" },
        team: { provider: "openai", apiKeyEnv: "TEAM_KEY" },
        vllm: { provider: "openai", baseUrl: "http://10.0.0.5:8000/v1" },
        gateway: { provider: "anthropic", baseUrl: "https://gw.example.com", apiKeyEnv: "TEAM_KEY" },
        claude: { provider: "anthropic" },
        unset: { provider: "openai", baseUrl: "http://h/v1", apiKeyEnv: "NOT_SET" },
      }),
      env,
    );
    expect(Object.fromEntries(endpoints)).toEqual({
      openai: { name: "openai", provider: "openai", apiKeyEnv: "OPENAI_API_KEY", apiKey: "sk-default" },
      team: { name: "team", provider: "openai", apiKeyEnv: "TEAM_KEY", apiKey: "sk-team" },
      vllm: { name: "vllm", provider: "openai", baseUrl: "http://10.0.0.5:8000/v1" },
      gateway: {
        name: "gateway",
        provider: "anthropic",
        baseUrl: "https://gw.example.com",
        apiKeyEnv: "TEAM_KEY",
        apiKey: "sk-team",
      },
      claude: { name: "claude", provider: "anthropic", apiKeyEnv: "ANTHROPIC_API_KEY", apiKey: "sk-ant" },
      unset: { name: "unset", provider: "openai", baseUrl: "http://h/v1", apiKeyEnv: "NOT_SET" },
    });
  });

  it("reads a file when the value is a path", async () => {
    const dir = await mkdtemp(join(tmpdir(), "fleet-endpoints-"));
    try {
      const file = join(dir, "endpoints.json");
      await writeFile(
        file,
        JSON.stringify({ local: { provider: "openai", baseUrl: "http://127.0.0.1:1/v1" } }),
      );
      const config = loadConfig({ FLEET_MODEL_ENDPOINTS: file });
      expect(config.models.endpoints.get("local")).toEqual({
        name: "local",
        provider: "openai",
        baseUrl: "http://127.0.0.1:1/v1",
      });
      expect(() => loadConfig({ FLEET_MODEL_ENDPOINTS: join(dir, "missing.json") })).toThrow(
        /^FLEET_MODEL_ENDPOINTS: cannot read the file .*missing\.json \(ENOENT\)/,
      );
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("a bad entry is refused at start with an error naming it", () => {
    const cases: [unknown, RegExp][] = [
      [{ x: { provider: "mistral" } }, /^FLEET_MODEL_ENDPOINTS\.x\.provider: /],
      [{ x: {} }, /^FLEET_MODEL_ENDPOINTS\.x\.provider: /],
      [
        { x: { provider: "openai", baseUrl: "not a url" } },
        /^FLEET_MODEL_ENDPOINTS\.x\.baseUrl: must be an http/,
      ],
      [{ x: { provider: "openai", baseUrl: "file:///tmp" } }, /^FLEET_MODEL_ENDPOINTS\.x\.baseUrl: /],
      [{ x: { provider: "openai", apiKeyEnv: "NOT-A-NAME" } }, /^FLEET_MODEL_ENDPOINTS\.x\.apiKeyEnv: /],
      [{ x: { provider: "openai", apiKey: "sk-1" } }, /^FLEET_MODEL_ENDPOINTS\.x\.apiKey: .*apiKeyEnv/],
      [{ x: { provider: "openai", base_url: "http://h" } }, /^FLEET_MODEL_ENDPOINTS\.x: /],
      [{ "a b": { provider: "openai" } }, /^FLEET_MODEL_ENDPOINTS\.a b: an endpoint name/],
      [{ x: "openai" }, /^FLEET_MODEL_ENDPOINTS\.x: /],
      [[], /^FLEET_MODEL_ENDPOINTS: must be a JSON object/],
    ];
    for (const [value, message] of cases) {
      expect(
        () => loadConfig({ FLEET_MODEL_ENDPOINTS: JSON.stringify(value) }),
        JSON.stringify(value),
      ).toThrow(message);
    }
    expect(() => loadConfig({ FLEET_MODEL_ENDPOINTS: "{ nope" })).toThrow(
      /^FLEET_MODEL_ENDPOINTS: is not valid JSON/,
    );
    // The key itself is never echoed.
    try {
      loadConfig({
        FLEET_MODEL_ENDPOINTS: JSON.stringify({ x: { provider: "openai", apiKey: "sk-SECRET" } }),
      });
    } catch (error) {
      expect((error as Error).message).not.toContain("sk-SECRET");
    }
  });

  it("a baseUrl with a user name or password is refused at start, and never quoted", () => {
    // Accepted before: fetch refused every request to it with a TypeError quoting the whole
    // URL, so the password became every run's error, log line and parked reason.
    for (const baseUrl of [
      "http://gw-user:Pa55w0rd-of-the-gw@127.0.0.1:8000/v1",
      "https://Pa55w0rd-of-the-gw@gw.example.com",
    ]) {
      const error = validationError(() =>
        loadConfig({ FLEET_MODEL_ENDPOINTS: JSON.stringify({ gw: { provider: "openai", baseUrl } }) }),
      );
      expect(error.message).toMatch(
        /^FLEET_MODEL_ENDPOINTS\.gw\.baseUrl: must not carry a user name or password; .*apiKeyEnv/,
      );
      expect(error.message).not.toContain("Pa55w0rd");
    }
  });

  it("unset: no endpoints, and the provider keys as before", () => {
    const config = loadConfig({ OPENAI_API_KEY: "sk-o", ANTHROPIC_API_KEY: "" });
    expect(config.models.endpoints.size).toBe(0);
    expect(config.models.allowedBaseUrls).toEqual([]);
    expect(config.models.apiKeys).toEqual({ openai: "sk-o", anthropic: undefined });
  });
});

describe("the route of a MODEL", () => {
  const routing: ModelRouting = loadConfig({
    OPENAI_API_KEY: "sk-operator",
    ANTHROPIC_API_KEY: "sk-ant-operator",
    TEAM_KEY: "sk-team",
    FLEET_ALLOWED_BASE_URLS: "http://127.0.0.1",
    FLEET_MODEL_ENDPOINTS: JSON.stringify({
      team: { provider: "openai", baseUrl: "https://team.example.com/v1", apiKeyEnv: "TEAM_KEY" },
      vllm: { provider: "openai", baseUrl: "http://10.0.0.5:8000/v1" },
      claude: { provider: "anthropic" },
    }),
  }).models;
  const route = (model: unknown, field = "agent.model") =>
    resolveModelRoute(parseModelConfig(model), routing, field);

  it("no endpoint, no baseUrl: the provider's host and its key", () => {
    expect(route({ provider: "openai", model: "m" })).toEqual({
      keyEnv: "OPENAI_API_KEY",
      apiKey: "sk-operator",
    });
    expect(route({ provider: "anthropic", model: "m" })).toEqual({
      keyEnv: "ANTHROPIC_API_KEY",
      apiKey: "sk-ant-operator",
    });
    expect(route({ provider: "scripted", steps: [{ text: "hi" }] })).toBeNull();
  });

  it("a declared endpoint: its base URL and its own key, or none", () => {
    expect(route({ provider: "openai", model: "m", endpoint: "team" })).toEqual({
      endpoint: "team",
      baseUrl: "https://team.example.com/v1",
      keyEnv: "TEAM_KEY",
      apiKey: "sk-team",
    });
    expect(route({ provider: "openai", model: "m", endpoint: "vllm" })).toEqual({
      endpoint: "vllm",
      baseUrl: "http://10.0.0.5:8000/v1",
    });
    expect(route({ provider: "anthropic", model: "m", endpoint: "claude" })).toEqual({
      endpoint: "claude",
      keyEnv: "ANTHROPIC_API_KEY",
      apiKey: "sk-ant-operator",
    });
  });

  it("a raw allowed baseUrl: that URL and no key", () => {
    expect(route({ provider: "openai", model: "m", baseUrl: "http://127.0.0.1:8080/v1" })).toEqual({
      baseUrl: "http://127.0.0.1:8080/v1",
    });
    expect(route({ provider: "anthropic", model: "m", baseUrl: "http://127.0.0.1:9000" })).toEqual({
      baseUrl: "http://127.0.0.1:9000",
    });
  });

  it("errors name the field", () => {
    const cases: [unknown, string, string, RegExp][] = [
      [
        { provider: "openai", model: "m", baseUrl: "http://127.0.0.1.evil.com/v1" },
        "agent.model",
        "agent.model.baseUrl",
        /FLEET_ALLOWED_BASE_URLS/,
      ],
      [
        { provider: "anthropic", model: "m", baseUrl: "https://api.evil.com" },
        "model",
        "model.baseUrl",
        /FLEET_ALLOWED_BASE_URLS/,
      ],
      [
        { provider: "openai", model: "m", endpoint: "nope" },
        "agent.model",
        "agent.model.endpoint",
        /no endpoint named "nope"/,
      ],
      [
        { provider: "anthropic", model: "m", endpoint: "team" },
        "agent.model",
        "agent.model.endpoint",
        /declared for provider openai/,
      ],
      [
        { provider: "openai", model: "m", endpoint: "team", baseUrl: "http://127.0.0.1/v1" },
        "agent.model",
        "agent.model.baseUrl",
        /either endpoint or baseUrl/,
      ],
    ];
    for (const [model, root, field, message] of cases) {
      const error = validationError(() => route(model, root));
      expect(error.field).toBe(field);
      expect(error.message).toMatch(message);
    }
    const none = { ...routing, allowedBaseUrls: [] };
    const error = validationError(() =>
      resolveModelRoute(
        parseModelConfig({ provider: "openai", model: "m", baseUrl: "http://127.0.0.1/v1" }),
        none,
      ),
    );
    expect(error.message).toMatch(/^model\.baseUrl: a raw baseUrl is not allowed by this fleet/);
  });

  it("an agent's fallback models are checked too, naming their index", () => {
    const agent = parseAgentConfig({
      model: { provider: "openai", model: "m", endpoint: "team" },
      fallbackModels: [
        { provider: "scripted", steps: [{ text: "hi" }] },
        { provider: "openai", model: "m", baseUrl: "http://169.254.169.254/latest" },
      ],
    });
    const error = validationError(() => checkAgentModels(agent, routing, "sessions[3].agent"));
    expect(error.field).toBe("sessions[3].agent.fallbackModels[1].baseUrl");
  });

  it("MODEL schemas take `endpoint`, still refuse an apiKey, and name bad fields", () => {
    expect(parseModelConfig({ provider: "anthropic", model: "m", endpoint: "claude" })).toMatchObject({
      endpoint: "claude",
    });
    expect(
      validationError(() => parseModelConfig({ provider: "openai", model: "m", endpoint: "" })).field,
    ).toBe("model.endpoint");
    expect(
      validationError(() => parseAgentConfig({ model: { provider: "openai", model: "m", baseUrl: "nope" } }))
        .field,
    ).toBe("agent.model.baseUrl");
    expect(
      validationError(() => parseAgentConfig({ model: { provider: "openai", model: "m", apiKey: "sk-1" } }))
        .field,
    ).toBe("agent.model.apiKey");
  });
});

describe("createModel (the worker's check)", () => {
  const faults = { increment: async () => 1 };
  const routing = loadConfig({
    OPENAI_API_KEY: "sk-operator",
    FLEET_ALLOWED_BASE_URLS: "http://127.0.0.1:8080",
    FLEET_MODEL_ENDPOINTS: JSON.stringify({
      team: { provider: "openai", apiKeyEnv: "TEAM_KEY" },
      // A key pasted where the variable's name goes: Hugging Face's hf_… fits a name.
      pasted: {
        provider: "openai",
        baseUrl: "http://127.0.0.1:8080/v1",
        apiKeyEnv: "hf_pastedKey0123456789abcdef",
      },
    }),
  }).models;
  const build = (model: ModelConfig) => createModel(model, { faults, routing }, "agent.model");

  it("a raw baseUrl not allowed is a ValidationError naming the field, before anything is sent", () => {
    const error = validationError(() =>
      build({ provider: "openai", model: "m", baseUrl: "http://127.0.0.1:9090/v1" }),
    );
    expect(error.field).toBe("agent.model.baseUrl");
    expect(validationError(() => build({ provider: "anthropic", model: "m", endpoint: "team" })).field).toBe(
      "agent.model.endpoint",
    );
  });

  /** The error a request to `endpoint` fails with, none of its variables being set. */
  const failure = async (endpoint: string): Promise<Error> => {
    const events = build({ provider: "openai", model: "m", endpoint }).stream({
      sessionId: "s",
      history: [],
      tools: [],
      signal: new AbortController().signal,
    });
    try {
      for await (const _ of events) {
        // nothing is expected
      }
    } catch (error) {
      return error as Error;
    }
    throw new Error("the request did not fail");
  };

  it("a declared endpoint whose variable is empty fails the request naming the endpoint, not the variable", async () => {
    // The message is the run's error and parked reason, which tenants read: the variable's
    // name is the operator's text, and may be a key pasted there by mistake.
    expect((await failure("team")).message).toBe(
      'the key of endpoint "team" (the variable its apiKeyEnv names) is not set in the worker\'s environment',
    );
    expect((await failure("pasted")).message).not.toContain("hf_pasted");
  });
});
