/**
 * The limits that always hold (contracts §12, §10, §15) under a production batch's weather:
 * many sessions of one tenant on three `fleet worker` processes at once, one of them SIGKILLed
 * again and again (and replaced), a `fleet sweeper`, a declared endpoint that answers some
 * requests 429 and some 503, a tool loop that never ends on its own, and each session
 * continued by a new message after it parked. Checked at the end, per session: the provider
 * got no more non-429 requests than `budget.maxModelCalls` (a 429 of a declared endpoint is a
 * wait, not a call), the stored count agrees, tokens stayed within one step of
 * `budget.maxTokens`, the history is contiguous, no tool ran twice, and each parked reason
 * names its limit; and while it ran, the tenant never had more active sessions than its cap.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { type FakeOpenAI, type FakeResponse, startFakeOpenAI } from "./support/fake-openai.js";
import { createFleetEnv, type FleetEnv, type WorkerProcess, waitFor } from "./support/fleet-env.js";

const SESSIONS = 24;
const MAX_CALLS = 7;
const MAX_TURNS = 4;
const MAX_ACTIVE = 8;
const WORKER_ENV = { WORKER_CONCURRENCY: "4", WORKER_RESUME_CONCURRENCY: "4" };

/** The session a chat request belongs to: its first user message, `s<i>`. */
// biome-ignore lint/suspicious/noExplicitAny: a JSON body
function sessionOf(body: any): string {
  const first = (body?.messages ?? []).find((m: { role?: string }) => m.role === "user");
  return typeof first?.content === "string" ? first.content : "?";
}

describe("limits under kills, 429s and continuations, across worker processes", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let fake: FakeOpenAI;
  /** Non-429 requests the provider answered, per session. */
  const calls = new Map<string, number>();
  let n = 0;

  beforeAll(async () => {
    fake = await startFakeOpenAI([], {
      respond: (body): FakeResponse => {
        const s = sessionOf(body);
        n++;
        if (n % 5 === 0)
          return { status: 429, headers: { "retry-after": "0" }, errorType: "rate_limit_error" };
        calls.set(s, (calls.get(s) ?? 0) + 1);
        if (n % 7 === 0) return { status: 503, errorType: "server_error" };
        return {
          delayMs: 150,
          toolCalls: [
            {
              id: `c${n}`,
              name: "append_file",
              arguments: JSON.stringify({ path: `${s}.txt`, line: `c${n}` }),
            },
          ],
          usage: { prompt_tokens: 30, completion_tokens: 10 },
        };
      },
    });
    fleet = await createFleetEnv("limitskills", {
      env: {
        FLEET_MODEL_ENDPOINTS: JSON.stringify({
          flaky: { provider: "openai", baseUrl: fake.url, limits: { requestsPerMinute: 60_000 } },
        }),
        FLEET_TENANT_MAX_ACTIVE_SESSIONS: String(MAX_ACTIVE),
        SWEEPER_MAX_ATTEMPTS: "6",
        SWEEPER_BACKOFF_MS: "100",
        SWEEP_INTERVAL_MS: "200",
      },
    });
    ({ client } = await fleet.startApi());
    await fleet.spawnSweeper();
  }, 120_000);

  afterAll(async () => {
    await fleet?.close();
    await fake?.close();
  });

  it("holds maxModelCalls, maxTokens, maxTurns and the active cap, and names each limit", async () => {
    const workers: WorkerProcess[] = await Promise.all([
      fleet.spawnWorker(WORKER_ENV),
      fleet.spawnWorker(WORKER_ENV),
      fleet.spawnWorker(WORKER_ENV),
    ]);
    const { sql } = fleet.database;
    let maxActive = 0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const [row] = await sql<{ n: number }[]>`
          select count(distinct r.session_id)::int as n from runs r join sessions s on s.id = r.session_id
           where r.status <> 'ended' and s.status <> 'parked'`;
        maxActive = Math.max(maxActive, row!.n);
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    const agent = {
      model: { provider: "openai" as const, endpoint: "flaky", model: "m" },
      tools: ["append_file"],
      maxTurns: MAX_TURNS,
      budget: { maxModelCalls: MAX_CALLS, maxTokens: 10_000 },
    };
    const ids: string[] = [];
    for (let i = 0; i < SESSIONS; i++) ids.push((await client.createSession({ agent })).id);
    // Sends wait out the active cap by themselves (the client retries 429s).
    const sends = Promise.all(ids.map((id, i) => client.send(id, `s${i}`)));
    const parked = async (min: number) => {
      const [row] = await sql<{ n: number }[]>`
        select count(*)::int as n from sessions s where s.status = 'parked'
           and not exists (select 1 from runs r where r.session_id = s.id and r.status <> 'ended')`;
      return row!.n >= min;
    };
    // Kill a worker every time some more model calls went by, until every session parked.
    let kills = 0;
    const killer = (async () => {
      let seen = fake.requests.length;
      while (!(await parked(SESSIONS)) && kills < 6) {
        if (fake.requests.length < seen + 25) {
          await new Promise((r) => setTimeout(r, 50));
          continue;
        }
        seen = fake.requests.length;
        const victim = workers.shift()!;
        victim.child.kill("SIGKILL");
        await victim.exited;
        kills++;
        workers.push(await fleet.spawnWorker(WORKER_ENV));
      }
    })();
    await sends;
    await waitFor(() => parked(SESSIONS), 240_000, "every session parked after its first request");
    await killer;
    // Each parked session is continued by a new message, then runs into its budget.
    for (const id of ids) await client.send(id, "more");
    await waitFor(() => parked(SESSIONS), 240_000, "every session parked after its continuation");
    sampling = false;
    await sampler;
    console.log(`kills ${kills}, requests ${fake.requests.length}, max active ${maxActive}`);

    expect(maxActive).toBeLessThanOrEqual(MAX_ACTIVE);
    for (const [i, id] of ids.entries()) {
      const session = await client.getSession(id);
      const [row] = await sql<{ model_calls: number; tokens_used: string }[]>`
        select model_calls, tokens_used::text from sessions where id = ${id}`;
      const where = `s${i} (${id}): ${session.parkedReason}`;
      expect(calls.get(`s${i}`) ?? 0, where).toBeLessThanOrEqual(MAX_CALLS);
      expect(row!.model_calls, where).toBeLessThanOrEqual(MAX_CALLS);
      expect(session.status, where).toBe("parked");
      expect(session.parkedReason, where).toMatch(
        /^(budget_exhausted: agent\.budget\.maxModelCalls|max_turns)/,
      );
      expect(session.messages.map((m) => m.seq)).toEqual(session.messages.map((_, k) => k + 1));
      const results = session.messages.filter((m) => m.role === "tool");
      expect(new Set(results.map((m) => (m.role === "tool" ? m.toolCallId : ""))).size).toBe(results.length);
      const ran = results.filter((m) => m.role === "tool" && m.success).length;
      const lines = await readFile(join(fleet.config.toolDir, `s${i}.txt`), "utf8").catch(() => "");
      const written = lines.split("\n").filter(Boolean);
      // No tool ran twice on its own: each line once; a line without a stored result is a call
      // cut by a kill (its result says so).
      expect(new Set(written).size, where).toBe(written.length);
      expect(written.length, where).toBeGreaterThanOrEqual(ran);
      // Each request's model calls within one run: maxTurns.
      for (const run of session.runs)
        expect((run.usage as { inputTokens?: number })?.inputTokens ?? 0, where).toBeLessThanOrEqual(
          30 * MAX_TURNS,
        );
      expect(Number(row!.tokens_used), where).toBeLessThanOrEqual(10_000);
    }
  }, 600_000);
});
