/**
 * Per-tenant limits and fair dispatch (contracts §10), against the real API, Postgres and
 * Redis: the active-session cap (429 + Retry-After, nothing stored, held under concurrent
 * requests, a parked session stays parked when refused), the fleet-wide request rate, the
 * client waiting out 429s, admin routes (Bull Board) behind admin keys, and one tenant's
 * batch not starving another tenant's session on a real worker.
 */
import { Queue } from "bullmq";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetApiError, FleetClient } from "../src/producer/client.js";
import { FairDispatch } from "../src/producer/fair-dispatch.js";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { type Answer, readAnswer } from "./support/answer.js";
import { rankAfterCancel } from "./support/fair-cancel.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { CRASH_HISTORY } from "./support/histories.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

async function call(
  base: string,
  method: string,
  path: string,
  auth?: string,
  body?: unknown,
): Promise<Answer> {
  const headers: Record<string, string> = {};
  if (body !== undefined) headers["content-type"] = "application/json";
  if (auth !== undefined) headers.authorization = auth;
  const response = await fetch(`${base}${path}`, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const answer = await readAnswer(response);
  return {
    ...answer,
    retryAfter: response.headers.get("retry-after"),
    challenge: response.headers.get("www-authenticate"),
  } as Answer & {
    retryAfter: string | null;
    challenge: string | null;
  };
}

const bearer = (key: string) => `Bearer ${key}`;
const basic = (key: string) => `Basic ${Buffer.from(`ops:${key}`).toString("base64")}`;

describe("active sessions per tenant (FLEET_TENANT_MAX_ACTIVE_SESSIONS)", () => {
  let fleet: FleetEnv;
  let base: string;
  const key: Record<string, string> = {};

  beforeAll(async () => {
    fleet = await createFleetEnv("tenant-active", { env: { FLEET_TENANT_MAX_ACTIVE_SESSIONS: "3" } });
    const keys = new ApiKeys(fleet.database);
    for (const tenant of ["a", "b", "c"]) key[tenant] = (await keys.create(tenant)).key;
    base = (await fleet.startApi()).api.url;
  }, 60_000);
  afterAll(() => fleet?.close());

  const batch = (tenant: string, n: number) =>
    call(base, "POST", "/v1/batches", bearer(key[tenant]!), {
      sessions: Array.from({ length: n }, (_, i) => ({ agent: AGENT, input: `go ${i}`, metadata: { i } })),
    });
  const sessionsOf = async (tenant: string) =>
    (await call(base, "GET", "/v1/sessions?limit=1000", bearer(key[tenant]!))).json.sessions as {
      id: string;
    }[];

  it("refuses what would go past the cap with 429, Retry-After and nothing stored; other tenants are not affected", async () => {
    // No worker runs: every queued run keeps its session active.
    expect((await batch("a", 2)).status).toBe(201);
    const over = (await batch("a", 2)) as Answer & { retryAfter: string | null };
    expect(over.status, over.text).toBe(429);
    expect(over.retryAfter).toBe("5");
    expect(over.json).toEqual({
      error: {
        code: "too_many_requests",
        message: expect.stringContaining("at most 3 active sessions"),
        limit: "active_sessions",
        retryAfter: 5,
      },
    });
    expect(over.json.error.message).toContain("room for 1");
    // More than the cap at once never fits: said at once, not a 429 to wait out for ever.
    const never = await batch("a", 4);
    expect(never.status, never.text).toBe(400);
    expect(never.json.error).toMatchObject({
      code: "invalid_request",
      field: "sessions",
      message: expect.stringContaining("send at most 3 at once"),
    });
    expect(await sessionsOf("a")).toHaveLength(2);
    expect((await batch("a", 1)).status).toBe(201);
    // A session without a run is not active: creating one is fine; giving it work is not.
    const idle = await call(base, "POST", "/v1/sessions", bearer(key.a!), { agent: AGENT });
    expect(idle.status).toBe(201);
    const send = await call(base, "POST", `/v1/sessions/${idle.json.id}/messages`, bearer(key.a!), {
      content: "hi",
    });
    expect(send.status, send.text).toBe(429);
    // More input for a session that is already active counts it once.
    const [active] = (await sessionsOf("a")).filter((s) => s.id !== idle.json.id);
    const again = await call(base, "POST", `/v1/sessions/${active!.id}/messages`, bearer(key.a!), {
      content: "more",
    });
    expect(again.status, again.text).toBe(202);
    expect((await batch("b", 3)).status).toBe(201);
  });

  it("holds under concurrent requests: of 12 sends to idle sessions of one tenant, exactly 3 are queued", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 12; i++) {
      ids.push((await call(base, "POST", "/v1/sessions", bearer(key.c!), { agent: AGENT })).json.id);
    }
    const answers = await Promise.all(
      ids.map((id) => call(base, "POST", `/v1/sessions/${id}/messages`, bearer(key.c!), { content: "go" })),
    );
    const statuses = answers.map((a) => a.status).sort();
    expect(statuses.filter((s) => s === 202)).toHaveLength(3);
    expect(statuses.filter((s) => s === 429)).toHaveLength(9);
    const [row] = await fleet.database.sql<{ n: number }[]>`
      select count(distinct session_id)::int as n from runs where tenant = 'c' and status <> 'ended'`;
    expect(row!.n).toBe(3);
  });

  it("a parked session refused by the cap stays parked (nothing would resume it behind the caller's back)", async () => {
    const { json } = await call(base, "POST", "/v1/sessions", bearer(key.b!), {
      agent: AGENT,
      messages: CRASH_HISTORY,
    });
    await fleet.database
      .sql`update sessions set status = 'parked', parked_reason = 'attempts_exhausted: 3 automatic resumes made no progress' where id = ${json.id}`;
    for (const action of [
      call(base, "POST", `/v1/sessions/${json.id}/resume`, bearer(key.b!), {}),
      call(base, "POST", `/v1/sessions/${json.id}/messages`, bearer(key.b!), { content: "go on" }),
    ]) {
      expect((await action).status).toBe(429);
    }
    const [session] = await fleet.database.sql<{ status: string; parked_reason: string }[]>`
      select status, parked_reason from sessions where id = ${json.id}`;
    expect(session).toEqual({
      status: "parked",
      parked_reason: "attempts_exhausted: 3 automatic resumes made no progress",
    });
    // The list filters by the reason's code; a prefix that is not a whole code (with a LIKE
    // wildcard or not) could match nothing and is refused.
    const byCode = await call(base, "GET", "/v1/sessions?parkedReason=attempts_exhausted", bearer(key.b!));
    expect(byCode.json.sessions.map((x: { id: string }) => x.id)).toEqual([json.id]);
    const partial = await call(base, "GET", "/v1/sessions?parkedReason=attempts", bearer(key.b!));
    expect([partial.status, partial.json.error.field]).toEqual([400, "parkedReason"]);
    const wild = await call(base, "GET", "/v1/sessions?parkedReason=attempts%25", bearer(key.b!));
    expect([wild.status, wild.json.error.field]).toEqual([400, "parkedReason"]);
    const runs = await fleet.database.sql`select 1 from runs where session_id = ${json.id}`;
    expect(runs).toHaveLength(0);
  });

  it("frees room as sessions end: a worker runs tenant a's sessions, then a's new batch is accepted", async () => {
    await fleet.spawnWorker();
    await waitFor(
      async () => {
        const [row] = await fleet.database.sql<{ n: number }[]>`
          select count(*)::int as n from runs where tenant = 'a' and status <> 'ended'`;
        return row!.n === 0;
      },
      30_000,
      "tenant a's runs to end",
    );
    expect((await batch("a", 3)).status).toBe(201);
  });
});

describe("request rate per tenant, admin routes", () => {
  let fleet: FleetEnv;
  let base: string;
  const key: Record<string, string> = {};

  beforeAll(async () => {
    fleet = await createFleetEnv("tenant-rate", {
      env: { FLEET_TENANT_REQUESTS_PER_SECOND: "4", FLEET_TENANT_REQUEST_BURST: "5" },
    });
    const keys = new ApiKeys(fleet.database);
    for (const tenant of ["a", "b"]) key[tenant] = (await keys.create(tenant)).key;
    key.ops = (await keys.create("ops", { admin: true })).key;
    base = (await fleet.startApi()).api.url;
  }, 60_000);
  afterAll(() => fleet?.close());

  it("admits a burst, then answers 429 with Retry-After; another tenant and open routes are not slowed", async () => {
    const started = performance.now();
    const answers = await Promise.all(
      Array.from({ length: 12 }, () => call(base, "GET", "/v1/sessions", bearer(key.a!))),
    );
    const seconds = (performance.now() - started) / 1000;
    const ok = answers.filter((a) => a.status === 200);
    const limited = answers.filter((a) => a.status === 429) as (Answer & { retryAfter: string | null })[];
    expect(ok.length).toBeGreaterThanOrEqual(5);
    // The burst of 5, and what 4 a second refilled while the twelve were being answered (under
    // CI's load they take a few hundred milliseconds, room for one or two more).
    expect(ok.length).toBeLessThanOrEqual(5 + Math.floor(4 * seconds) + 1);
    expect(limited.length).toBeGreaterThan(0);
    expect(limited.length).toBe(12 - ok.length);
    expect(limited[0]!.retryAfter).toMatch(/^[1-9]\d*$/);
    expect(limited[0]!.json.error).toMatchObject({ code: "too_many_requests", limit: "request_rate" });
    expect((await call(base, "GET", "/v1/sessions", bearer(key.b!))).status).toBe(200);
    for (let i = 0; i < 10; i++) expect((await call(base, "GET", "/healthz")).status).toBe(200);
    // 4 a second: after half a second there is room again.
    await new Promise((resolve) => setTimeout(resolve, 600));
    expect((await call(base, "GET", "/v1/sessions", bearer(key.a!))).status).toBe(200);
  });

  it("the client waits out 429s (up to maxLimitWaitMs) and otherwise reports retryAfter", async () => {
    const patient = new FleetClient({ baseUrl: base, apiKey: key.b });
    const results = await Promise.all(Array.from({ length: 9 }, () => patient.listSessions()));
    expect(results).toHaveLength(9);
    const hasty = new FleetClient({ baseUrl: base, apiKey: key.b, maxLimitWaitMs: 0 });
    const errors = await Promise.all(
      Array.from({ length: 9 }, () =>
        hasty.listSessions().then(
          () => undefined,
          (error: unknown) => error,
        ),
      ),
    );
    const refused = errors.filter((e): e is FleetApiError => e instanceof FleetApiError);
    expect(refused.length).toBeGreaterThan(0);
    expect(refused[0]).toMatchObject({ status: 429, code: "too_many_requests", limit: "request_rate" });
    expect(refused[0]!.retryAfter).toBeGreaterThanOrEqual(1);
  });

  it("the client's batchResults waits out a 429 too, like every other call", async () => {
    const patient = new FleetClient({ baseUrl: base, apiKey: key.b });
    const { id } = await patient.createBatch([{ agent: AGENT, customId: "one" }]);
    // The tenant's burst spent: its next request is refused with a Retry-After.
    const spent = await Promise.all(
      Array.from({ length: 8 }, () => call(base, "GET", "/v1/sessions", bearer(key.b!))),
    );
    expect(spent.some((a) => a.status === 429)).toBe(true);
    const lines = [];
    for await (const line of patient.batchResults(id)) lines.push(line);
    expect(lines.map((l) => l.customId)).toEqual(["one"]);
  });

  it("serves Bull Board at /admin/queues to admin keys only (Bearer or Basic), read-only", async () => {
    const none = (await call(base, "GET", "/admin/queues")) as Answer & { challenge: string | null };
    expect(none.status).toBe(401);
    expect(none.challenge).toBe('Basic realm="agent-fleet admin"');
    expect(none.json.error.code).toBe("unauthorized");
    expect((await call(base, "GET", "/admin/queues", bearer(key.a!))).status).toBe(403);
    expect((await call(base, "GET", "/admin/queues", basic(key.a!))).status).toBe(403);
    expect((await call(base, "GET", "/admin/queues/api/queues", basic("fk_nope_nope"))).status).toBe(401);
    expect((await call(base, "GET", "/%61dmin/queues")).status).toBe(401);
    const page = await call(base, "GET", "/admin/queues", basic(key.ops!));
    expect(page.status, page.text.slice(0, 300)).toBe(200);
    expect(page.contentType).toMatch(/text\/html/);
    const api = await call(base, "GET", "/admin/queues/api/queues", bearer(key.ops!));
    expect(api.status, api.text.slice(0, 300)).toBe(200);
    const queues = api.json.queues as { name: string; readOnlyMode: boolean }[];
    expect(queues.map((q) => q.name).sort()).toEqual(["resumes", "runs", "webhooks"]);
    expect(queues.every((q) => q.readOnlyMode)).toBe(true);
  });

  it("admin routes never answer 5xx, and every path under /admin needs the admin key", async () => {
    const paths = [
      "/admin",
      "/admin/",
      "/admin/queues/",
      "/admin/queues/api/queues?activeQueue=runs&status=failed&page=1",
      "/admin/queues/api/queues/runs/nope",
      "/admin/queues/api/queues/nope/nope",
      "/admin/queues/api/queues/runs/%00",
      "/admin/queues/api/queues/runs/%ED%A0%80/logs",
      "/admin/queues/api/queues/runs/retry/failed",
      "/admin/queues/api/redis/stats",
      "/admin/queues/static/../../package.json",
      "/admin/queues/queue/runs",
      "/admin/nothing",
    ];
    for (const path of paths) {
      for (const method of ["GET", "PUT", "POST", "DELETE", "PATCH"]) {
        const anonymous = await call(base, method, path);
        // A path Fastify cannot even decode is a 400 before anyone looks at keys; nothing else passes.
        const undecodable = path.includes("%ED");
        expect(anonymous.status, `${method} ${path}`).toBe(undecodable ? 400 : 401);
        expect(anonymous.json?.error?.code, `${method} ${path}`).toBe(
          undecodable ? "invalid_request" : "unauthorized",
        );
        const admin = await call(base, method, path, bearer(key.ops!));
        expect(admin.status, `${method} ${path} → ${admin.text.slice(0, 200)}`).toBeLessThan(500);
        expect(admin.text, `${method} ${path}`).not.toMatch(/node_modules| {4}at /);
      }
    }
  });
});

describe("fair dispatch", () => {
  it("hands out per-tenant priorities from the queue's head, and starts over when nothing waits", async () => {
    const fleet = await createFleetEnv("fair-unit");
    const queue = new Queue("runs", { connection: fleet.redis, prefix: fleet.config.prefix });
    try {
      const fair = new FairDispatch({
        redis: fleet.redis,
        queue,
        prefix: fleet.config.prefix,
        enabled: true,
      });
      const a = (await fair.assign("a", 1000))!;
      expect(a[0]).toBe(1);
      expect(a[999]).toBe(1000);
      await queue.addBulk(a.map((priority, i) => ({ name: "run", data: { i }, opts: { priority } })));
      // Half of a's jobs are taken: the head is now at 501.
      for (const job of await queue.getJobs(["prioritized"], 0, 499, true)) await job.remove();
      expect((await fair.assign("b", 3))!).toEqual([501, 502, 503]);
      expect((await fair.assign("a", 1))!).toEqual([1001]);
      await queue.obliterate({ force: true });
      expect((await fair.assign("a", 2))!).toEqual([1, 2]);
      const off = new FairDispatch({
        redis: fleet.redis,
        queue,
        prefix: fleet.config.prefix,
        enabled: false,
      });
      expect(await off.assign("a", 2)).toBeUndefined();
    } finally {
      await queue.close();
      await fleet.close();
    }
  });

  it("a tenant that cancelled its batch is not put behind another tenant's backlog for it", async () => {
    const fleet = await createFleetEnv("fair-cancel");
    const queue = new Queue("runs", { connection: fleet.redis, prefix: fleet.config.prefix });
    try {
      const keys = new ApiKeys(fleet.database);
      const baseUrl = (await fleet.startApi()).api.url;
      const a = new FleetClient({ baseUrl, apiKey: (await keys.create("a")).key });
      const b = new FleetClient({ baseUrl, apiKey: (await keys.create("b")).key });
      // No worker: every run waits. Both tenants queue 30; then a cancels its batch and queues one more.
      // a has nothing waiting now: its next run goes near the head, not behind b's 30.
      const { waiting, rank } = await rankAfterCancel(a, b, queue, AGENT);
      expect(waiting).toBe(31);
      expect(rank).toBeLessThanOrEqual(1);
    } finally {
      await queue.close();
      await fleet.close();
    }
  });

  // A worker with one slot; tenant big queues 16 sessions that take ~120 ms each, then tenant
  // small queues one. Where small's run starts among all runs is what fair dispatch changes:
  // right after the head of the queue, or behind the whole batch.
  async function startRankOfSmall(fair: "on" | "off"): Promise<number> {
    const fleet = await createFleetEnv(`fair-${fair}`, {
      env: { FLEET_FAIR_DISPATCH: fair, WORKER_CONCURRENCY: "1" },
    });
    try {
      const keys = new ApiKeys(fleet.database);
      const big = new FleetClient({
        baseUrl: (await fleet.startApi()).api.url,
        apiKey: (await keys.create("big")).key,
      });
      const small = new FleetClient({
        baseUrl: (big as unknown as { baseUrl: string }).baseUrl,
        apiKey: (await keys.create("small")).key,
      });
      await fleet.spawnWorker();
      // Both tenants' runs are queued before the worker may take any: the order is the queue's alone.
      const runs = new Queue("runs", { connection: fleet.redis, prefix: fleet.config.prefix });
      await runs.pause();
      const agent = {
        model: {
          provider: "scripted" as const,
          steps: [{ toolCalls: [{ id: "nap", name: "sleep", arguments: { ms: 120 } }] }, { text: "done" }],
        },
        tools: ["sleep"],
      };
      await big.createBatch(Array.from({ length: 16 }, (_, i) => ({ agent, input: `big ${i}` })));
      const { sessions } = await small.createBatch([{ agent, input: "small" }]);
      await runs.resume();
      await runs.close();
      await small.waitForRun(sessions[0]!.runId!, { timeoutMs: 30_000 });
      const rows = await fleet.database.sql<{ tenant: string }[]>`
        select tenant from runs where started_at is not null order by started_at, id`;
      return rows.findIndex((r) => r.tenant === "small") + 1;
    } finally {
      await fleet.close();
    }
  }

  it("one tenant's batch does not starve another tenant's session (and first-in-first-out does)", async () => {
    const fairRank = await startRankOfSmall("on");
    const fifoRank = await startRankOfSmall("off");
    expect(fairRank).toBe(2);
    expect(fifoRank).toBe(17);
  }, 90_000);
});
