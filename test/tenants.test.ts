/**
 * Tenants and API keys (contracts §10): `fleet keys` through the real CLI, 401s, dev mode
 * (no key stored: served on loopback only, turned off by the first key without a restart),
 * the refusal to serve a non-loopback address without a key, FLEET_BOOTSTRAP_KEY, and
 * ownership: another tenant's sessions and runs answer exactly like ids that do not exist.
 */
import { request as httpRequest } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startApi } from "../src/producer/api-server.js";
import { AUTH_CACHE_MS } from "../src/producer/auth.js";
import { FleetClient } from "../src/producer/client.js";
import { type Answer, readAnswer } from "./support/answer.js";
import { type CliResult, runFleetCli } from "./support/fleet-cli.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { CRASH_HISTORY } from "./support/histories.js";
import { readSse } from "./support/sse.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };
const UNKNOWN = "00000000-0000-4000-8000-000000000000";

function runCli(env: Record<string, string>, args: string[], timeoutMs = 20_000): Promise<CliResult> {
  return runFleetCli(args, env, timeoutMs);
}

describe("tenants and API keys", () => {
  let fleet: FleetEnv;
  let base: string;
  const keys: Record<string, { key: string; id: string }> = {};

  async function call(method: string, path: string, key?: string, body?: unknown): Promise<Answer> {
    const headers: Record<string, string> = {};
    if (body !== undefined) headers["content-type"] = "application/json";
    if (key !== undefined) headers.authorization = key.startsWith("Bearer") ? key : `Bearer ${key}`;
    const response = await fetch(`${base}${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return readAnswer(response);
  }

  function expectUnauthorized(answer: Answer): void {
    expect(answer.status, answer.text).toBe(401);
    expect(answer.contentType).toMatch(/application\/json/);
    expect(answer.json).toEqual({ error: { code: "unauthorized", message: expect.any(String) } });
  }

  async function createKey(tenant: string): Promise<{ key: string; id: string }> {
    const result = await runCli(fleet.env, ["keys", "create", "--tenant", tenant]);
    expect(result.code, result.stderr).toBe(0);
    const key = result.stdout.trim();
    expect(key).toMatch(/^fk_[0-9a-f]{12}_[A-Za-z0-9_-]{43}$/);
    const id = /key (\S+) created for tenant (\S+)/.exec(result.stderr);
    expect(id?.[2]).toBe(tenant);
    expect(key.startsWith(`fk_${id![1]}_`)).toBe(true);
    // stdout is a pipe here, not a terminal: the key is not "printed above".
    expect(result.stderr).toContain("(written to stdout, only this once;");
    return { key, id: id![1]! };
  }

  beforeAll(async () => {
    fleet = await createFleetEnv("tenants");
    const started = await fleet.startApi();
    base = started.api.url;
    expect(started.api.devMode).toBe(true);
  });
  afterAll(async () => fleet?.close());

  describe("with no key stored (dev mode)", () => {
    it("serves without a key on loopback, as tenant default", async () => {
      const created = await call("POST", "/v1/sessions", undefined, { agent: AGENT });
      expect(created.status, created.text).toBe(201);
      const [row] = await fleet.database.sql<{ tenant: string }[]>`
        select tenant from sessions where id = ${created.json.id}`;
      expect(row?.tenant).toBe("default");
      const sent = await call("POST", `/v1/sessions/${created.json.id}/messages`, undefined, {
        content: "hi",
      });
      expect(sent.status, sent.text).toBe(202);
      const [run] = await fleet.database.sql<{ tenant: string }[]>`
        select tenant from runs where id = ${sent.json.runId}`;
      expect(run?.tenant).toBe("default");
      // A key that is not stored is refused even now: nobody is silently served as someone else.
      expectUnauthorized(await call("GET", "/v1/sessions", "fk_000000000000_garbage"));
    });

    it("answers only requests addressed to a loopback name: a rebound DNS name gets 403 and creates nothing", async () => {
      /** A request to the API's own address under another `Host` (fetch may not set one). */
      const asHost = (host: string, method: string, path: string, body?: unknown) =>
        new Promise<{ status: number; text: string }>((resolve, reject) => {
          const url = new URL(path, base);
          const req = httpRequest(
            url,
            { method, headers: { host, ...(body ? { "content-type": "application/json" } : {}) } },
            (res) => {
              let text = "";
              res.on("data", (d) => {
                text += d;
              });
              res.on("end", () => resolve({ status: res.statusCode ?? 0, text }));
            },
          );
          req.on("error", reject);
          req.end(body ? JSON.stringify(body) : undefined);
        });
      const port = new URL(base).port;
      const before = await fleet.database.sql`select count(*)::int as n from sessions`;
      for (const host of [`rebind.attacker.example:${port}`, `127.0.0.1.nip.io:${port}`, "evil.example"]) {
        const created = await asHost(host, "POST", "/v1/sessions", { agent: AGENT });
        expect(created.status, host).toBe(403);
        expect(JSON.parse(created.text)).toMatchObject({
          error: { code: "forbidden", message: expect.stringMatching(/loopback name/) },
        });
        expect((await asHost(host, "GET", "/admin/queues")).status, host).toBe(403);
      }
      expect(await fleet.database.sql`select count(*)::int as n from sessions`).toEqual(before);
      for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, `[::1]:${port}`, "127.0.0.2"])
        expect((await asHost(host, "GET", "/v1/sessions")).status, host).toBe(200);
      // Open routes stay open under any name (a load balancer's health check).
      expect((await asHost("lb.internal", "GET", "/healthz")).status).toBe(200);
    });

    it("`fleet api` refuses to listen on 0.0.0.0: exit 2 and one line saying how to create a key", async () => {
      const result = await runCli({ ...fleet.env, HOST: "0.0.0.0", PORT: "0" }, ["api"]);
      expect(result.code, result.stdout + result.stderr).toBe(2);
      const lines = result.stderr.trim().split("\n");
      expect(lines).toHaveLength(1);
      expect(lines[0]).toContain("0.0.0.0");
      expect(lines[0]).toContain("fleet keys create --tenant NAME");
      expect(result.stdout).not.toContain("ready");
    });
  });

  describe("fleet keys", () => {
    it("creates keys (printed once, only the hash stored) and lists them", async () => {
      keys.acme = await createKey("acme");
      keys.globex = await createKey("globex");
      const stored = await fleet.database.sql<{ id: string; hash: string; prefix: string }[]>`
        select id, hash, prefix from api_keys order by id`;
      expect(stored).toHaveLength(2);
      for (const { key } of Object.values(keys)) {
        expect(JSON.stringify(stored)).not.toContain(key);
        expect(JSON.stringify(stored)).not.toContain(key.slice(-20));
      }
      const list = await runCli(fleet.env, ["keys", "list"]);
      expect(list.code, list.stderr).toBe(0);
      const lines = list.stdout.trim().split("\n");
      expect(lines[0]).toMatch(/^ID\s+TENANT\s+PREFIX\s+ADMIN\s+CREATED\s+REVOKED$/);
      for (const [tenant, { key, id }] of Object.entries(keys)) {
        const line = lines.find((l) => l.startsWith(id));
        expect(line, list.stdout).toBeDefined();
        expect(line).toMatch(new RegExp(`^${id}\\s+${tenant}\\s+fk_${id}_…\\s+no\\s+\\d{4}-\\S+Z\\s+-$`));
        expect(line).not.toContain(key.slice(-20));
      }
    });

    it("refuses bad input with exit 2", async () => {
      expect((await runCli(fleet.env, ["keys", "create"])).code).toBe(2);
      expect((await runCli(fleet.env, ["keys", "create", "--tenant", "no spaces"])).code).toBe(2);
      const revoke = await runCli(fleet.env, ["keys", "revoke", "nosuchkey"]);
      expect(revoke.code).toBe(2);
      expect(revoke.stderr.trim()).toBe(
        "fleet keys revoke: API key nosuchkey not found (`fleet keys list` shows the keys' ids)",
      );
      const help = await runCli(fleet.env, ["keys", "--help"]);
      expect(help.code).toBe(0);
      expect(help.stdout).toContain("fleet keys create --tenant NAME");
    });

    it("the first key turns authentication on without a restart", async () => {
      await waitFor(
        async () => (await call("GET", "/v1/sessions")).status === 401,
        AUTH_CACHE_MS + 2_000,
        "requests without a key to be refused",
      );
      expect((await call("GET", "/v1/sessions", keys.acme!.key)).status).toBe(200);
    });
  });

  describe("authentication", () => {
    it("answers 401 without a key, with a garbage key and with a malformed header", async () => {
      expectUnauthorized(await call("GET", "/v1/sessions"));
      expectUnauthorized(await call("POST", "/v1/sessions", undefined, { agent: AGENT }));
      expectUnauthorized(await call("GET", `/v1/sessions/${UNKNOWN}`));
      expectUnauthorized(await call("GET", "/v1/nope"));
      expectUnauthorized(await call("GET", "/v1/sessions", "fk_000000000000_garbage"));
      expectUnauthorized(await call("GET", "/v1/sessions", `${keys.acme!.key}x`));
      expectUnauthorized(await call("GET", "/v1/sessions", `Basic ${keys.acme!.key}`));
      expectUnauthorized(await call("GET", "/v1/sessions", `Bearer ${"x".repeat(10_000)}`));
      // Refused before the body is read: an unparseable body still answers 401.
      const raw = await fetch(`${base}/v1/sessions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: "{not json",
      });
      expect(raw.status).toBe(401);
      expect(await fleet.database.sql`select 1 from sessions where tenant <> 'default'`).toHaveLength(0);
    });

    it("leaves /healthz and /metrics open", async () => {
      expect((await call("GET", "/healthz")).status).toBe(200);
      expect((await call("GET", "/metrics")).status).toBe(200);
    });

    it("the TypeScript client sends its apiKey", async () => {
      const client = new FleetClient({ baseUrl: base, apiKey: keys.acme!.key });
      const { id } = await client.createSession({ agent: AGENT });
      expect((await client.getSession(id)).id).toBe(id);
      await expect(new FleetClient({ baseUrl: base }).getSession(id)).rejects.toMatchObject({
        status: 401,
        code: "unauthorized",
      });
    });
  });

  describe("ownership", () => {
    let acmeSession: string;
    let acmeRun: string;
    let globexSession: string;
    let globexRun: string;

    beforeAll(async () => {
      const created = await call("POST", "/v1/sessions", keys.acme!.key, {
        agent: AGENT,
        messages: CRASH_HISTORY,
        metadata: { owner: "acme" },
      });
      expect(created.status, created.text).toBe(201);
      acmeSession = created.json.id;
      const batch = await call("POST", "/v1/batches", keys.globex!.key, {
        sessions: [{ agent: AGENT, input: "hello", metadata: { owner: "globex" } }],
      });
      expect(batch.status, batch.text).toBe(201);
      globexSession = batch.json.sessions[0].id;
      globexRun = batch.json.sessions[0].runId;
    });

    it("stores the tenant on sessions and runs, whichever way they were created", async () => {
      const resumed = await call("POST", `/v1/sessions/${acmeSession}/resume`, keys.acme!.key, {});
      expect(resumed.status, resumed.text).toBe(202);
      acmeRun = resumed.json.runId;
      const sessions = await fleet.database.sql<{ id: string; tenant: string }[]>`
        select id, tenant from sessions where id in (${acmeSession}, ${globexSession}) order by tenant`;
      expect(sessions).toEqual([
        { id: acmeSession, tenant: "acme" },
        { id: globexSession, tenant: "globex" },
      ]);
      const runs = await fleet.database.sql<{ id: string; tenant: string }[]>`
        select id, tenant from runs where id in (${acmeRun}, ${globexRun}) order by tenant`;
      expect(runs).toEqual([
        { id: acmeRun, tenant: "acme" },
        { id: globexRun, tenant: "globex" },
      ]);
    });

    it("each tenant sees its own sessions, runs and resume points", async () => {
      const acme = await call("GET", `/v1/sessions/${acmeSession}`, keys.acme!.key);
      expect(acme.status).toBe(200);
      expect(acme.json.metadata).toEqual({ owner: "acme" });
      expect((await call("GET", `/v1/sessions/${globexSession}`, keys.globex!.key)).status).toBe(200);
      expect((await call("GET", `/v1/runs/${acmeRun}`, keys.acme!.key)).json.sessionId).toBe(acmeSession);
      expect((await call("GET", `/v1/runs/${globexRun}`, keys.globex!.key)).json.sessionId).toBe(
        globexSession,
      );
      expect((await call("GET", `/v1/sessions/${acmeSession}/resume-point`, keys.acme!.key)).status).toBe(
        200,
      );

      const listed = async (key: string) =>
        ((await call("GET", "/v1/sessions", key)).json.sessions as { id: string }[]).map((s) => s.id);
      const acmeList = await listed(keys.acme!.key);
      const globexList = await listed(keys.globex!.key);
      expect(acmeList).toContain(acmeSession);
      expect(acmeList).not.toContain(globexSession);
      expect(globexList).toEqual([globexSession]);
      // Sessions of dev mode belong to tenant default: neither sees them.
      const [devSession] = await fleet.database.sql<{ id: string }[]>`
        select id from sessions where tenant = 'default'`;
      expect(acmeList).not.toContain(devSession!.id);
      expect((await call("GET", "/v1/sessions?status=active", keys.globex!.key)).json.sessions).toHaveLength(
        1,
      );
    });

    it("another tenant's ids answer 404 with exactly the body of a missing id", async () => {
      const routes: [string, (id: string) => string, unknown?][] = [
        ["GET", (id) => `/v1/sessions/${id}`],
        ["GET", (id) => `/v1/sessions/${id}/resume-point`],
        ["POST", (id) => `/v1/sessions/${id}/messages`, { content: "let me in" }],
        ["POST", (id) => `/v1/sessions/${id}/resume`, {}],
      ];
      const pairs: [string, string, string][] = [
        [keys.globex!.key, acmeSession, UNKNOWN],
        [keys.acme!.key, globexSession, UNKNOWN],
      ];
      for (const [key, theirs, missing] of pairs) {
        for (const [method, path, body] of routes) {
          const other = await call(method, path(theirs), key, body);
          const absent = await call(method, path(missing), key, body);
          expect(other.status, `${method} ${path(theirs)}`).toBe(404);
          expect(other.contentType).toBe(absent.contentType);
          expect(other.text.replaceAll(theirs, missing)).toBe(absent.text);
          expect(other.json).toEqual({
            error: { code: "not_found", message: `session ${theirs} not found` },
          });
        }
      }
      for (const [key, theirs] of [
        [keys.globex!.key, acmeRun],
        [keys.acme!.key, globexRun],
      ] as const) {
        const other = await call("GET", `/v1/runs/${theirs}`, key);
        const absent = await call("GET", `/v1/runs/${UNKNOWN}`, key);
        expect(other.status).toBe(404);
        expect(other.text.replaceAll(theirs, UNKNOWN)).toBe(absent.text);
      }
      // Nothing was queued into the other tenant's sessions.
      expect(await fleet.database.sql`select 1 from runs where input = 'let me in'`).toHaveLength(0);
      expect(await fleet.database.sql`select 1 from runs where session_id = ${globexSession}`).toHaveLength(
        1,
      );
    });
  });

  it("a revoked key is refused once the cache window has passed", async () => {
    const temp = await createKey("acme");
    expect((await call("GET", "/v1/sessions", temp.key)).status).toBe(200);
    // A stream opened with the key before it is revoked ends once the key stops working.
    const created = await call("POST", "/v1/sessions", temp.key, { agent: AGENT });
    const stream = readSse(`${base}/v1/sessions/${created.json.id}/events`, {
      headers: { authorization: `Bearer ${temp.key}` },
      stop: () => false,
      // From the stream's opening, so it holds the two `fleet keys` children below too: they
      // took over 10 s on a loaded machine (load 20), and the stream, which ends only once the
      // key is revoked, then timed out (AUTH_CACHE_MS + 5 s) before the test could wait for it.
      timeoutMs: 60_000,
    });
    await new Promise((resolve) => setTimeout(resolve, 300));
    const revoked = await runCli(fleet.env, ["keys", "revoke", temp.id]);
    expect(revoked.code, revoked.stderr).toBe(0);
    const list = await runCli(fleet.env, ["keys", "list"]);
    expect(list.stdout.split("\n").find((l) => l.startsWith(temp.id))).toMatch(/\d{4}-\S+Z$/);
    // Used on meanwhile (this waited AUTH_CACHE_MS + 250 ms without a call): it answers as
    // before until the cache entry of its first use expires, then 401, however often it is used.
    let last: Answer | undefined;
    await waitFor(
      async () => {
        last = await call("GET", "/v1/sessions", temp.key);
        expect([200, 401], last.text).toContain(last.status);
        if (last.status === 200) await new Promise((resolve) => setTimeout(resolve, 100));
        return last.status === 401;
      },
      AUTH_CACHE_MS + 5_000,
      "the revoked key refused",
    );
    expectUnauthorized(last!);
    // Ended by the API (a stream still open would time out and throw here).
    expect((await stream).status).toBe(200);
    // The other keys of the tenant still work.
    expect((await call("GET", "/v1/sessions", keys.acme!.key)).status).toBe(200);
  }, 90_000);
});

describe("FLEET_BOOTSTRAP_KEY", () => {
  let fleet: FleetEnv;
  beforeAll(async () => {
    fleet = await createFleetEnv("bootstrap");
  });
  afterAll(async () => fleet?.close());

  it("refuses a key no client could send as `Bearer KEY` (a space, a byte outside visible ASCII, over 256 characters): the API does not start", async () => {
    // Before, such a key was stored and the API started: every request sending it as
    // `Authorization: Bearer KEY` was a 401 ("must be `Bearer KEY`", or an unknown key when
    // the client sent its UTF-8 bytes), for ever, with nothing saying why.
    for (const key of [
      `my bootstrap key ${"k".repeat(32)}`,
      `b\u00f6\u00f6t-${"k".repeat(32)}`,
      `tab\t${"k".repeat(32)}`,
      // Longer than any key the API reads (auth.ts MAX_KEY_LENGTH): stored, it was refused on
      // every request as "the Authorization header must be `Bearer KEY`".
      `long-${"k".repeat(300)}`,
    ]) {
      await expect(
        startApi({ ...fleet.config, bootstrapKey: key, logLevel: "silent" }, { port: 0 }),
      ).rejects.toMatchObject({ field: "FLEET_BOOTSTRAP_KEY" });
    }
    expect(await fleet.database.sql`select 1 from api_keys`).toHaveLength(0);
  });

  it("is stored for tenant default when no key exists, so the API may listen on 0.0.0.0", async () => {
    const key = `boot-${"k".repeat(40)}`;
    const api = await startApi(
      { ...fleet.config, host: "0.0.0.0", bootstrapKey: key, logLevel: "silent" },
      { port: 0 },
    );
    try {
      expect(api.devMode).toBe(false);
      const client = new FleetClient({ baseUrl: api.url, apiKey: key });
      const { id } = await client.createSession({ agent: AGENT });
      const [row] = await fleet.database.sql<
        { tenant: string }[]
      >`select tenant from sessions where id = ${id}`;
      expect(row?.tenant).toBe("default");
      await expect(new FleetClient({ baseUrl: api.url }).listSessions()).rejects.toMatchObject({
        status: 401,
      });
    } finally {
      await api.stop();
    }
    // Once a key exists, another bootstrap key is not added.
    const again = await startApi(
      { ...fleet.config, bootstrapKey: `other-${"k".repeat(40)}`, logLevel: "silent" },
      { port: 0 },
    );
    await again.stop();
    // Nor one no client could send: ignored as any other once a key exists, so an API whose
    // environment kept such a value still starts.
    const kept = await startApi(
      { ...fleet.config, bootstrapKey: `my bootstrap key ${"k".repeat(32)}`, logLevel: "silent" },
      { port: 0 },
    );
    await kept.stop();
    expect(await fleet.database.sql`select 1 from api_keys`).toHaveLength(1);
  });
});
