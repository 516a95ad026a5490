/**
 * The OpenAPI document at /v1/openapi.json against the real API: every documented operation
 * is a route, every `/v1` route is documented, and real answers of each route (successes
 * and errors) match the schema documented for their status.
 */
import { readFileSync } from "node:fs";
import { request } from "node:http";
import { join } from "node:path";
import { Ajv2020 } from "ajv/dist/2020.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetClient } from "../src/producer/client.js";
import { SESSION_STATUSES } from "../src/producer/fleet-service.js";
import { documentedSchemas } from "../src/producer/openapi.js";
import { ROUTE_DOCS } from "../src/producer/route-docs.js";
import { readAnswer } from "./support/answer.js";
import { createFleetEnv, type FleetEnv, ROOT } from "./support/fleet-env.js";
import { CRASH_HISTORY } from "./support/histories.js";
import { freePort, startRedis, stopRedis } from "./support/private-redis.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

describe("OpenAPI document", () => {
  let fleet: FleetEnv;
  let base: string;
  // biome-ignore lint/suspicious/noExplicitAny: the document is checked field by field
  let doc: any;

  beforeAll(async () => {
    fleet = await createFleetEnv("openapi");
    base = (await fleet.startApi()).api.url;
    const answer = await readAnswer(await fetch(`${base}/v1/openapi.json`));
    expect(answer.status).toBe(200);
    doc = answer.json;
  }, 60_000);
  afterAll(() => fleet?.close());

  const operations = () =>
    Object.entries(doc.paths as Record<string, Record<string, unknown>>).flatMap(([path, ops]) =>
      Object.keys(ops).map((method) => `${method.toUpperCase()} ${path.replace(/\{(\w+)\}/g, ":$1")}`),
    );

  it("is OpenAPI 3.1 and documents exactly the /v1 routes (nothing from /metrics, /healthz or /admin)", () => {
    expect(doc.openapi).toBe("3.1.0");
    // The package's version, as `fleet --version` prints it (it read 0.0.0 whatever the release).
    const pkg = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { version: string };
    expect(doc.info.version).toBe(pkg.version);
    expect(operations().sort()).toEqual(Object.keys(ROUTE_DOCS).sort());
    expect(doc.components.securitySchemes.bearer).toEqual({ type: "http", scheme: "bearer" });
    const create = doc.paths["/v1/sessions"].post;
    expect(
      create.requestBody.content["application/json"].schema.properties.agent.properties.model,
    ).toBeDefined();
    // 409: an Idempotency-Key reused with another body (contracts §9).
    // 403: dev mode, a request not addressed to a loopback name; 413/415: the body (Fastify);
    // 431: headers over Node's limit (answered before any route).
    expect(Object.keys(create.responses).sort()).toEqual([
      "201",
      "400",
      "401",
      "403",
      "408",
      "409",
      "413",
      "415",
      "429",
      "431",
      "500",
      "503",
    ]);
  });

  it("every documented operation is served (a made-up one is not)", async () => {
    for (const op of operations()) {
      const [method, path] = op.split(" ") as [string, string];
      const url = path.replace(":id", "00000000-0000-4000-8000-000000000000");
      const answer = await readAnswer(
        await fetch(`${base}${url}`, {
          method,
          headers: method === "POST" ? { "content-type": "application/json" } : {},
          body: method === "POST" ? "{}" : undefined,
        }),
      );
      expect(answer.json?.error?.message ?? "", op).not.toMatch(/^no route/);
    }
    const made = await readAnswer(await fetch(`${base}/v1/sessions`, { method: "DELETE" }));
    expect(made.status).toBe(404);
    expect(made.json.error.message).toMatch(/^no route/);
  });

  it("real answers match the schema documented for their status", async () => {
    const seen: string[] = [];
    async function check(op: string, url: string, method: string, body?: unknown) {
      const response = await fetch(`${base}${url}`, {
        method,
        headers: body === undefined ? {} : { "content-type": "application/json" },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const answer = await readAnswer(response);
      const documented = ROUTE_DOCS[op]!.responses[answer.status];
      expect(
        documented,
        `${op} answered ${answer.status}, which is not documented: ${answer.text}`,
      ).toBeDefined();
      if (documented?.schema) {
        const parsed = documented.schema.safeParse(answer.json);
        expect(parsed.success, `${op} ${answer.status}: ${parsed.error?.message}\n${answer.text}`).toBe(true);
      }
      seen.push(`${op} ${answer.status}`);
      return answer.json;
    }
    const { id } = await check("POST /v1/sessions", "/v1/sessions", "POST", {
      agent: AGENT,
      metadata: { a: 1 },
    });
    await check("POST /v1/sessions", "/v1/sessions", "POST", { agent: { model: {} } });
    const imported = await check("POST /v1/sessions", "/v1/sessions", "POST", {
      agent: AGENT,
      messages: CRASH_HISTORY,
    });
    const batch = await check("POST /v1/batches", "/v1/batches", "POST", {
      sessions: [{ agent: AGENT, input: "hi" }, { agent: AGENT }],
    });
    await check("GET /v1/sessions", "/v1/sessions?status=active&limit=5", "GET");
    await check("GET /v1/sessions/:id", `/v1/sessions/${imported.id}`, "GET");
    await check("GET /v1/sessions/:id", `/v1/sessions/${imported.id}?limit=2&runsLimit=1`, "GET");
    await check("GET /v1/sessions/:id", `/v1/sessions/${imported.id}?limit=0`, "GET");
    await check("GET /v1/sessions/:id", "/v1/sessions/nope", "GET");
    const { runId } = await check("POST /v1/sessions/:id/messages", `/v1/sessions/${id}/messages`, "POST", {
      content: "hello",
    });
    await check("GET /v1/runs/:id", `/v1/runs/${runId}`, "GET");
    await check("GET /v1/runs/:id", "/v1/runs/nope", "GET");
    await check("GET /v1/sessions/:id/resume-point", `/v1/sessions/${imported.id}/resume-point`, "GET");
    await check("GET /v1/sessions/:id/resume-point", `/v1/sessions/${id}/resume-point`, "GET");
    await check("POST /v1/sessions/:id/resume", `/v1/sessions/${imported.id}/resume`, "POST", {});
    await check("POST /v1/sessions/:id/resume", `/v1/sessions/${batch.sessions[1].id}/resume`, "POST", {});
    await check("GET /v1/sessions/:id", `/v1/sessions/${id}`, "GET");
    await check("PATCH /v1/sessions/:id", `/v1/sessions/${id}`, "PATCH", { sessionEvents: false });
    await check("PATCH /v1/sessions/:id", `/v1/sessions/${id}`, "PATCH", { sessionEvents: "no" });
    await check("PATCH /v1/sessions/:id", "/v1/sessions/nope", "PATCH", { sessionEvents: true });
    await check("GET /v1/openapi.json", "/v1/openapi.json", "GET");
    await check("DELETE /v1/sessions/:id", `/v1/sessions/${imported.id}`, "DELETE");
    await check("DELETE /v1/sessions/:id", `/v1/sessions/${imported.id}`, "DELETE");
    await check("DELETE /v1/batches/:id", `/v1/batches/${batch.id}`, "DELETE");
    await check("DELETE /v1/batches/:id", `/v1/batches/${batch.id}`, "DELETE");
    expect(seen).toEqual(
      expect.arrayContaining([
        "POST /v1/sessions 201",
        "POST /v1/sessions 400",
        "POST /v1/batches 201",
        "GET /v1/sessions 200",
        "GET /v1/sessions/:id 200",
        "GET /v1/sessions/:id 404",
        "POST /v1/sessions/:id/messages 202",
        "GET /v1/runs/:id 200",
        "GET /v1/sessions/:id/resume-point 200",
        "PATCH /v1/sessions/:id 200",
        "PATCH /v1/sessions/:id 400",
        "PATCH /v1/sessions/:id 404",
        "POST /v1/sessions/:id/resume 202",
        "POST /v1/sessions/:id/resume 409",
        "DELETE /v1/sessions/:id 200",
        "DELETE /v1/sessions/:id 404",
        "DELETE /v1/batches/:id 200",
        "DELETE /v1/batches/:id 404",
      ]),
    );
  });

  it("every $ref resolves inside the document, and real answers match the document as served", async () => {
    const refs = [...JSON.stringify(doc).matchAll(/"\$ref":"([^"]*)"/g)].map((m) => m[1]!);
    expect(refs.length).toBeGreaterThan(0);
    for (const ref of new Set(refs)) {
      expect(ref, "a reference inside the document").toMatch(/^#\//);
      const target = ref
        .slice(2)
        .split("/")
        .reduce((node, part) => node?.[part.replaceAll("~1", "/").replaceAll("~0", "~")], doc);
      expect(target, `${ref} points at nothing`).toBeDefined();
    }
    // What a client generated from the document does: validate answers with its schemas.
    const ajv = new Ajv2020({ strict: false, allErrors: true });
    const validate = (path: string, method: string, status: number, body: unknown) => {
      const schema = doc.paths[path][method].responses[status]?.content?.["application/json"]?.schema;
      expect(schema, `${method} ${path} ${status} is documented`).toBeDefined();
      const check = ajv.compile({ ...schema, components: doc.components });
      expect(check(body), `${method} ${path} ${status}: ${ajv.errorsText(check.errors)}`).toBe(true);
    };
    const post = async (url: string, body: unknown) =>
      readAnswer(
        await fetch(`${base}${url}`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify(body),
        }),
      );
    const created = await post("/v1/sessions", { agent: AGENT, messages: CRASH_HISTORY });
    validate("/v1/sessions", "post", 201, created.json);
    const invalid = await post("/v1/sessions", { agent: { model: {} } });
    validate("/v1/sessions", "post", 400, invalid.json);
    const session = await readAnswer(await fetch(`${base}/v1/sessions/${created.json.id}`));
    validate("/v1/sessions/{id}", "get", 200, session.json);
    const page = await readAnswer(await fetch(`${base}/v1/sessions/${created.json.id}?limit=1&runsLimit=0`));
    expect(page.json).toMatchObject({ nextAfterSeq: 1, nextRunsBefore: null });
    validate("/v1/sessions/{id}", "get", 200, page.json);
    const missing = await readAnswer(await fetch(`${base}/v1/sessions/nope`));
    validate("/v1/sessions/{id}", "get", 404, missing.json);
    const list = await readAnswer(await fetch(`${base}/v1/sessions?limit=2`));
    validate("/v1/sessions", "get", 200, list.json);
    const point = await readAnswer(await fetch(`${base}/v1/sessions/${created.json.id}/resume-point`));
    validate("/v1/sessions/{id}/resume-point", "get", 200, point.json);
    const batch = await post("/v1/batches", { sessions: [{ agent: AGENT, input: "hi" }] });
    const read = await readAnswer(await fetch(`${base}/v1/batches/${batch.json.id}?include=usage`));
    validate("/v1/batches/{id}", "get", 200, read.json);
    const cancelled = await post(`/v1/batches/${batch.json.id}/cancel`, {});
    validate("/v1/batches/{id}/cancel", "post", 202, cancelled.json);
    // Every status a session can have is one the document names (a generated client's enum).
    expect(doc.components.schemas.Session.properties.status.enum).toEqual([...SESSION_STATUSES]);
    const member = batch.json.sessions[0].id;
    const again = await post(`/v1/sessions/${member}/cancel`, {});
    validate("/v1/sessions/{id}/cancel", "post", 202, again.json);
    const gone = await readAnswer(await fetch(`${base}/v1/sessions/${member}`));
    expect(gone.json.status).toBe("cancelled");
    validate("/v1/sessions/{id}", "get", 200, gone.json);
    // Fastify's own answers about the body, and dev mode's answer to a foreign Host.
    const large = await readAnswer(
      await fetch(`${base}/v1/sessions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: `{"metadata": "${"x".repeat(17 * 1024 * 1024)}"}`,
      }),
    );
    validate("/v1/sessions", "post", 413, large.json);
    const form = await readAnswer(
      await fetch(`${base}/v1/sessions`, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: "agent=x",
      }),
    );
    validate("/v1/sessions", "post", 415, form.json);
    const foreign = await new Promise<{ status: number; json: unknown }>((resolve, reject) => {
      const url = new URL(`${base}/v1/sessions`);
      const req = request(
        { host: url.hostname, port: url.port, path: url.pathname, headers: { host: "rebound.example" } },
        (res) => {
          let text = "";
          res.on("data", (chunk) => {
            text += chunk;
          });
          res.on("end", () => resolve({ status: res.statusCode ?? 0, json: JSON.parse(text) }));
        },
      );
      req.on("error", reject);
      req.end();
    });
    validate("/v1/sessions", "get", foreign.status, foreign.json);
    expect(foreign.status).toBe(403);
  });

  it("names every operation once, after the FleetClient method that calls it", () => {
    const ids = Object.values<Record<string, { operationId?: string }>>(doc.paths).flatMap((ops) =>
      Object.values(ops).map((op) => op.operationId),
    );
    expect(ids).toHaveLength(operations().length);
    expect(new Set(ids).size).toBe(ids.length);
    for (const id of ids) {
      expect(typeof (FleetClient.prototype as unknown as Record<string, unknown>)[id!], String(id)).toBe(
        "function",
      );
    }
  });

  it("the client's openapi() is this document", async () => {
    expect(await new FleetClient({ baseUrl: base }).openapi()).toEqual(doc);
  });

  it("a second API in the process serves the same document, from schemas converted once a process", async () => {
    // documentedSchemas() converts ROUTE_DOCS from zod at its first call only (~70 % of an
    // API's start): the same object each call; each app is given a copy of it.
    expect(documentedSchemas()).toBe(documentedSchemas());
    const { api } = await fleet.startApi();
    try {
      expect(await new FleetClient({ baseUrl: api.url }).openapi()).toEqual(doc);
    } finally {
      await api.stop();
    }
  });

  it("documents the headers a client sends and gets, and the media types of streamed answers", () => {
    const header = (op: { parameters?: { in: string; name: string }[] }, name: string) =>
      op.parameters?.find((p) => p.in === "header" && p.name === name);
    for (const [path, ops] of Object.entries<Record<string, typeof doc>>(doc.paths)) {
      if (ops.post) {
        expect(header(ops.post, "Idempotency-Key"), `POST ${path}`).toBeDefined();
        expect(ops.post.responses["409"], `POST ${path}: a reused Idempotency-Key`).toBeDefined();
      }
      for (const op of Object.values(ops))
        expect(op.responses["429"]?.headers?.["Retry-After"], path).toBeDefined();
    }
    for (const path of ["/v1/sessions/{id}/events", "/v1/batches/{id}/events"]) {
      const events = doc.paths[path].get;
      expect(header(events, "Last-Event-ID"), path).toBeDefined();
      expect(Object.keys(events.responses["200"].content)).toEqual(["text/event-stream"]);
    }
    const results = doc.paths["/v1/batches/{id}/results"].get.responses["200"];
    expect(Object.keys(results.content)).toEqual(["application/x-ndjson"]);
  });

  it("documents the 503 a route answers while Redis is away, with its Retry-After, and the 500 of every route", async () => {
    const port = await freePort();
    let redis = await startRedis(port);
    const away = await createFleetEnv("openapi503", { redisUrl: `redis://127.0.0.1:${port}` });
    try {
      const url = (await away.startApi()).api.url;
      const served = (await readAnswer(await fetch(`${url}/v1/openapi.json`))).json;
      const created = await readAnswer(
        await fetch(`${url}/v1/sessions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ agent: AGENT }),
        }),
      );
      await stopRedis(redis);
      const events = await fetch(`${url}/v1/sessions/${created.json.id}/events`);
      const answer = await readAnswer(events);
      expect(answer.status).toBe(503);
      expect(answer.json.error.code).toBe("unavailable");
      const documented = served.paths["/v1/sessions/{id}/events"].get.responses["503"];
      expect(documented, "503 is documented").toBeDefined();
      const ajv = new Ajv2020({ strict: false, allErrors: true });
      const check = ajv.compile({
        ...documented.content["application/json"].schema,
        components: served.components,
      });
      expect(check(answer.json), ajv.errorsText(check.errors)).toBe(true);
      expect(events.headers.get("retry-after")).toBe("1");
      expect(documented.headers["Retry-After"]).toBeDefined();
      // Every operation documents both server errors the error handler can answer.
      for (const [path, ops] of Object.entries<Record<string, { responses: Record<string, unknown> }>>(
        served.paths,
      ))
        for (const [method, op] of Object.entries(ops)) {
          expect(op.responses["500"], `${method} ${path} 500`).toBeDefined();
          expect(op.responses["503"], `${method} ${path} 503`).toBeDefined();
        }
    } finally {
      redis = await startRedis(port);
      await away.close();
      await stopRedis(redis);
    }
  }, 60_000);
});
