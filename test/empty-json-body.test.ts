/**
 * `Content-Type: application/json` with an empty body, sent as curl sends it (`curl -X POST
 * -H 'Content-Type: application/json' URL`: no Content-Length; `-d ''`: Content-Length 0; a
 * chunked body of no chunks): on a route whose body is optional it is no body at all, as if
 * the header had not been sent; on a route that needs a body it is a 400 in the error shape
 * saying the body is missing. Which route is which comes from the OpenAPI document
 * (`requestBody.required`), so the document and the API cannot disagree.
 */
import { connect } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

type RawAnswer = { status: number; headers: Record<string, string>; text: string };

/** The three ways a client sends "application/json, and nothing". */
const EMPTY_BODIES = {
  "no Content-Length": "",
  "Content-Length: 0": "Content-Length: 0\r\n",
  "chunked, no chunks": "Transfer-Encoding: chunked\r\n",
} as const;

describe("an empty JSON body", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let port: number;
  // biome-ignore lint/suspicious/noExplicitAny: the OpenAPI document is read as plain JSON
  let document: any;

  /** One HTTP/1.1 request written byte for byte; the answer read until the server closes. */
  function raw(method: string, path: string, how: keyof typeof EMPTY_BODIES, extra = ""): Promise<RawAnswer> {
    const chunked = how === "chunked, no chunks";
    const request =
      `${method} ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n` +
      `Content-Type: application/json\r\n${EMPTY_BODIES[how]}${extra}\r\n${chunked ? "0\r\n\r\n" : ""}`;
    return new Promise((resolve, reject) => {
      const socket = connect(port, "127.0.0.1");
      const chunks: Buffer[] = [];
      socket.on("data", (chunk) => chunks.push(chunk));
      socket.on("error", reject);
      socket.on("close", () => {
        const answer = Buffer.concat(chunks).toString("utf8");
        const [head = "", ...rest] = answer.split("\r\n\r\n");
        const [statusLine = "", ...lines] = head.split("\r\n");
        const headers = Object.fromEntries(
          lines.map((line) => [
            line.slice(0, line.indexOf(":")).toLowerCase(),
            line.slice(line.indexOf(":") + 1).trim(),
          ]),
        );
        resolve({ status: Number(statusLine.split(" ")[1]), headers, text: rest.join("\r\n\r\n") });
      });
      socket.on("connect", () => socket.write(request));
    });
  }

  /** Each documented write route, with whether the document says its body is required. */
  function writeRoutes(): { method: string; path: string; required: boolean }[] {
    const routes: { method: string; path: string; required: boolean }[] = [];
    for (const [path, operations] of Object.entries<Record<string, { requestBody?: { required?: boolean } }>>(
      document.paths,
    ))
      for (const [method, operation] of Object.entries(operations))
        if (method !== "get")
          routes.push({
            method: method.toUpperCase(),
            path,
            required: operation.requestBody?.required === true,
          });
    return routes;
  }

  async function countSessions(): Promise<number> {
    const [row] = await fleet.database.sql<{ n: number }[]>`select count(*)::int as n from sessions`;
    return row!.n;
  }

  /** A session whose history ends with a user message: a resume of it is `call_model`. */
  async function interruptedSession(): Promise<string> {
    const { id } = await client.createSession({ agent: AGENT, messages: [{ role: "user", content: "hi" }] });
    return id;
  }

  /** The path with a fresh session's or batch's id, so that acting on it succeeds. */
  async function concrete(path: string): Promise<string> {
    if (!path.includes("{id}")) return path;
    const id = path.startsWith("/v1/batches/")
      ? (await client.createBatch([{ agent: AGENT }], { open: path.endsWith("/sessions") })).id
      : await interruptedSession();
    return path.replace("{id}", id);
  }

  beforeAll(async () => {
    // Per-tenant webhook secrets on, so that rotating one (a route with no body) is served.
    fleet = await createFleetEnv("emptyjsonbody", {
      env: { FLEET_WEBHOOK_SECRET: "an operator's secret", FLEET_WEBHOOK_SECRET_PER_TENANT: "1" },
    });
    const started = await fleet.startApi();
    client = started.client;
    port = Number(new URL(started.api.url).port);
    document = await (await fetch(`${started.api.url}/v1/openapi.json`)).json();
  });
  afterAll(async () => fleet?.close());

  it("the document says which bodies are optional: resume's, a batch's resume, cancels, deletes and a secret's rotation", () => {
    const optional = writeRoutes()
      .filter((route) => !route.required)
      .map((route) => `${route.method} ${route.path}`)
      .sort();
    expect(optional).toEqual([
      "DELETE /v1/batches/{id}",
      "DELETE /v1/sessions/{id}",
      "POST /v1/batches/{id}/cancel",
      "POST /v1/batches/{id}/resume",
      "POST /v1/sessions/{id}/cancel",
      "POST /v1/sessions/{id}/resume",
      "POST /v1/webhook-secret/rotate",
    ]);
    const resume = document.paths["/v1/sessions/{id}/resume"].post.requestBody;
    expect(resume.required).toBe(false);
    expect(Object.keys(resume.content)).toEqual(["application/json"]);
  });

  for (const how of Object.keys(EMPTY_BODIES) as (keyof typeof EMPTY_BODIES)[]) {
    it(`(${how}) is no body where the body is optional: each such route acts as without one`, async () => {
      for (const route of writeRoutes().filter((r) => !r.required)) {
        const path = await concrete(route.path);
        const answer = await raw(route.method, path, how);
        expect(answer.status, `${route.method} ${route.path}: ${answer.text}`).toBeGreaterThanOrEqual(200);
        expect(answer.status, `${route.method} ${route.path}: ${answer.text}`).toBeLessThan(300);
      }
    });

    it(`(${how}) is a 400 in the error shape where a body is needed, and nothing is stored`, async () => {
      for (const route of writeRoutes().filter((r) => r.required)) {
        const path = await concrete(route.path);
        const stored = await countSessions();
        const answer = await raw(route.method, path, how);
        const what = `${route.method} ${route.path}: ${answer.text}`;
        expect(answer.status, what).toBe(400);
        expect(answer.headers["content-type"], what).toMatch(/^application\/json/);
        expect(JSON.parse(answer.text), what).toEqual({
          error: {
            code: "invalid_request",
            field: "",
            message: "the body must be a JSON object, and none was sent",
          },
        });
        expect(await countSessions(), what).toBe(stored);
      }
    });
  }

  it("no body and no Content-Type at all is said the same way, not as `null` (Fastify's stand-in for a part not sent)", async () => {
    const answer = await fetch(`http://127.0.0.1:${port}/v1/sessions`, { method: "POST" });
    expect(answer.status).toBe(400);
    expect(await answer.json()).toEqual({
      error: {
        code: "invalid_request",
        field: "",
        message: "the body must be a JSON object, and none was sent",
      },
    });
  });

  it("a resume sent with an empty JSON body is queued, and is the same request as one sent without a body", async () => {
    const id = await interruptedSession();
    const key = "Idempotency-Key: empty-body-resume\r\n";
    const first = await raw("POST", `/v1/sessions/${id}/resume`, "Content-Length: 0", key);
    expect(first.status, first.text).toBe(202);
    expect(JSON.parse(first.text)).toMatchObject({ runId: expect.any(String), kind: "call_model" });
    // The retry sends no body and no Content-Type: the same request, replayed, not a 409.
    const retry = await fetch(`http://127.0.0.1:${port}/v1/sessions/${id}/resume`, {
      method: "POST",
      headers: { "idempotency-key": "empty-body-resume" },
    });
    expect(retry.status).toBe(202);
    expect(retry.headers.get("idempotent-replayed")).toBe("true");
    expect(await retry.json()).toEqual(JSON.parse(first.text));
  });

  /** The routes that take nothing but their path: no body, or `{}`. */
  const NO_FIELD_ROUTES = [
    "/v1/sessions/{id}/cancel",
    "/v1/batches/{id}/cancel",
    "/v1/webhook-secret/rotate",
  ] as const;

  /**
   * The route's path with a target it acts on: a session or a batch with a queued run (no
   * worker here, so it stays queued until cancelled).
   */
  async function withQueuedRun(route: string): Promise<string> {
    if (route.startsWith("/v1/batches/"))
      return route.replace("{id}", (await client.createBatch([{ agent: AGENT, input: "go" }])).id);
    if (!route.startsWith("/v1/sessions/")) return route;
    const { id } = await client.createSession({ agent: AGENT });
    await client.send(id, "go");
    return route.replace("{id}", id);
  }

  /** What a refused request must not have done: the session or batch is not cancelled, no secret rotated. */
  async function acted(path: string): Promise<string> {
    const [, kind, id] = /^\/v1\/(sessions|batches)\/([^/]+)\/cancel$/.exec(path) ?? [];
    if (kind === "sessions") return (await client.getSession(id!)).status;
    if (kind === "batches") return (await client.getBatch(id!)).status;
    const [row] = await fleet.database.sql<{ generation: number }[]>`
      select coalesce(max(generation), 0)::int as generation from webhook_secret_generations`;
    return `generation ${row!.generation}`;
  }

  it("the routes that take nothing but their path take no body or `{}`, and refuse a field with a 400 naming it, acting on nothing", async () => {
    for (const route of NO_FIELD_ROUTES) {
      const path = await withQueuedRun(route);
      const send = (text: string) =>
        fetch(`http://127.0.0.1:${port}${path}`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: text,
        });
      const before = await acted(path);
      // Before, the cancels accepted any body and ignored it: this cancelled (202).
      const refused = await send('{"reason":"too slow"}');
      expect(refused.status, route).toBe(400);
      expect(await refused.json(), route).toEqual({
        error: { code: "invalid_request", field: "reason", message: "reason: unknown field" },
      });
      const notObject = await send("[]");
      expect(notObject.status, route).toBe(400);
      expect(await notObject.json(), route).toEqual({
        error: {
          code: "invalid_request",
          field: "",
          message: "the body must be a JSON object, not an array",
        },
      });
      expect(await acted(path), route).toBe(before);
      const taken = await send("{}");
      expect(taken.status, `${route}: ${await taken.clone().text()}`).toBeLessThan(300);
      expect(await acted(path), route).not.toBe(before);
      // The document says so: an optional body, an object with no fields.
      const body = document.paths[route].post.requestBody;
      expect(body?.required, route).toBe(false);
      expect(body?.content["application/json"].schema, route).toMatchObject({
        type: "object",
        properties: {},
        additionalProperties: false,
      });
    }
  });

  it("a DELETE takes no body or `{}`, and refuses a field with a 400 naming it, deleting nothing", async () => {
    for (const route of ["/v1/sessions/{id}", "/v1/batches/{id}"] as const) {
      const path = await withQueuedRun(route);
      const send = (text: string) =>
        fetch(`http://127.0.0.1:${port}${path}`, {
          method: "DELETE",
          headers: { "content-type": "application/json" },
          body: text,
        });
      const read = () =>
        route.startsWith("/v1/batches/")
          ? client.getBatch(path.split("/")[3]!)
          : client.getSession(path.split("/")[3]!);
      // Before, a DELETE accepted any body and ignored it: an option the caller believed in
      // (`{"dryRun": true}`) deleted the batch and all its sessions, 200.
      const refused = await send('{"dryRun":true}');
      expect(refused.status, route).toBe(400);
      expect(await refused.json(), route).toEqual({
        error: { code: "invalid_request", field: "dryRun", message: "dryRun: unknown field" },
      });
      const notObject = await send("[]");
      expect(notObject.status, route).toBe(400);
      await expect(read(), route).resolves.toMatchObject({ id: path.split("/")[3] });
      const taken = await send("{}");
      expect(taken.status, `${route}: ${await taken.clone().text()}`).toBe(200);
      await expect(read(), route).rejects.toMatchObject({ status: 404 });
      // The document says so: an optional body, an object with no fields.
      const body = document.paths[route].delete.requestBody;
      expect(body?.required, route).toBe(false);
      expect(body?.content["application/json"].schema, route).toMatchObject({
        type: "object",
        properties: {},
        additionalProperties: false,
      });
    }
  });

  it("a body that is not empty is still read: whitespace alone is not JSON, `{}` is", async () => {
    const id = await interruptedSession();
    const send = (body: string) =>
      fetch(`http://127.0.0.1:${port}/v1/sessions/${id}/resume`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body,
      });
    const blank = await send(" ");
    expect(blank.status).toBe(400);
    expect(((await blank.json()) as { error: { message: string } }).error.message).toBe(
      "the body is not valid JSON",
    );
    expect((await send("{}")).status).toBe(202);
  });
});
