/**
 * Hostile model endpoints (the first release's NUL-byte resume loop, issue "Nothing runs
 * away"): a real API, a real `fleet worker` child and a real sweeper, real Postgres and Redis,
 * and one endpoint per provider family (OpenAI chat, Responses, Anthropic) answering each
 * request with a fault from its session's script (test/support/hostile-endpoint.ts): a stream
 * cut at a random byte, a 200 of invalid JSON or of a garbage event stream, NUL bytes and
 * lone surrogates, 10 MB of text, tool calls with arguments that are not JSON, naming a tool
 * nobody has, or 3,000 of them, 429 with a `retry-after` of 0, huge, negative or not a number,
 * 500/529 for ever, a socket that never answers, absurd usage, a redirect to another host.
 *
 * Properties, per session:
 * - within TERMINAL_BOUND_MS it is `completed`, or `parked` with a reason of the contract
 *   (resume-policy.ts PARK_REASONS);
 * - the requests the endpoint got for it stay within the bound its settings allow
 *   (`requestBound`, worked out below);
 * - its stored messages have seqs 1..n, each once;
 * and the worker process is alive and still serving afterwards.
 *
 * The bound. A run makes at most `maxTurns` (T) model steps, each at most
 * DEFAULT_RETRY_POLICY.maxAttempts (R) requests (call-model.ts; ungated endpoints, so a 429 is
 * an attempt). Automatic resumes without progress are at most SWEEPER_MAX_ATTEMPTS (A) in a
 * row; with no tool the agent can run, the only progress is a continuation that stored new
 * text, at most T of them (resume-policy.ts). So at most 1 + T + (T + 1)·A runs, and
 * (1 + T + (T + 1)·A)·T·R requests. A session with `agent.budget.maxModelCalls` B gets at most
 * B requests: every step and every retry reserves one (agent-loop.ts).
 *
 * `FUZZ_SCALE=N` runs N× the sessions for a longer hunt; the seed is fixed (HOSTILE_SEED to
 * change it), and a failure prints each session's script and what it was served
 * (HOSTILE_VERBOSE=1 prints every session's; HOSTILE_LOG=warn shows the sweeper's log).
 */
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import type { SessionJson } from "../src/shared/api-types.js";
import { loadConfig } from "../src/shared/config.js";
import { PARK_REASONS } from "../src/shared/resume-policy.js";
import { type RunningSweeper, startSweeper } from "../src/sweeper/sweeper-process.js";
import { DEFAULT_RETRY_POLICY } from "../src/worker/call-model.js";
import { createFleetEnv, type FleetEnv, type WorkerProcess, waitFor } from "./support/fleet-env.js";
import {
  type Family,
  type Fault,
  type HostileEndpoint,
  startHostileEndpoint,
} from "./support/hostile-endpoint.js";

const SCALE = Number(process.env.FUZZ_SCALE ?? 1);
const SEED = Number(process.env.HOSTILE_SEED ?? 20261205);
/** Sessions per provider family. */
const PER_FAMILY = Math.max(1, Math.round(4 * SCALE));
const TERMINAL_BOUND_MS = 30_000;
const MAX_TURNS = 3;
const SWEEPER_MAX_ATTEMPTS = 2;
const MAX_MODEL_CALLS = 10;
const TUNING = {
  LEASE_TTL_MS: "1000",
  SWEEPER_BACKOFF_MS: "50",
  SWEEPER_MAX_ATTEMPTS: String(SWEEPER_MAX_ATTEMPTS),
  SWEEP_INTERVAL_MS: "100",
  // A socket that never answers holds a step this long (the idle timeout is 120 s).
  FLEET_MODEL_STEP_TIMEOUT_MS: "3000",
};

/** Requests one session may cost (see the file's comment). */
function requestBound(budgeted: boolean): number {
  if (budgeted) return MAX_MODEL_CALLS;
  const runs = 1 + MAX_TURNS + (MAX_TURNS + 1) * SWEEPER_MAX_ATTEMPTS;
  return runs * MAX_TURNS * DEFAULT_RETRY_POLICY.maxAttempts;
}

/** Faults that cost little time; the slow ones (a silent socket, a long retry-after) at most once. */
const quickFault: fc.Arbitrary<Fault> = fc.oneof(
  { arbitrary: fc.constant<Fault>({ kind: "ok" }), weight: 2 },
  fc.constant<Fault>({ kind: "nul" }),
  fc.constant<Fault>({ kind: "length" }),
  fc.constant<Fault>({ kind: "bad_args" }),
  { arbitrary: fc.constant<Fault>({ kind: "unknown_tool" }), weight: 2 },
  fc.constant<Fault>({ kind: "many_calls", count: 3_000 }),
  {
    arbitrary: fc.double({ min: 0.01, max: 0.99, noNaN: true }).map((at): Fault => ({ kind: "cut", at })),
    weight: 3,
  },
  fc.constant<Fault>({ kind: "garbage_json" }),
  fc.constant<Fault>({ kind: "garbage_sse" }),
  fc.constantFrom("0", "-5", "soon", "1.5e400").map((retryAfter): Fault => ({ kind: "r429", retryAfter })),
  { arbitrary: fc.constantFrom(500, 529).map((status): Fault => ({ kind: "status", status })), weight: 2 },
  fc
    .constantFrom([-5, 7], [1e300, 1e300], [Number.MAX_SAFE_INTEGER, -1], [0.5, 3])
    .map(([input, output]): Fault => ({ kind: "usage", input: input!, output: output! })),
  fc.constant<Fault>({ kind: "redirect" }),
);
const slowFault: fc.Arbitrary<Fault> = fc.oneof(
  fc.constant<Fault>({ kind: "hang" }),
  fc.constant<Fault>({ kind: "r429", retryAfter: "999999" }),
  fc.constant<Fault>({ kind: "huge", chars: 10_000_000 }),
);
/** A script played once, its last fault for ever after (a quick one), with at most one slow fault before. */
const onceArb: fc.Arbitrary<Fault[]> = fc
  .tuple(fc.array(quickFault, { minLength: 1, maxLength: 7 }), fc.option(slowFault, { freq: 3 }), fc.nat(7))
  .map(([faults, slow, at]) => {
    if (slow) faults.splice(Math.min(at, faults.length - 1), 0, slow);
    return faults;
  });
/** A script played round and round: only quick faults, so a loop shows as requests, not as time. */
const cycleArb: fc.Arbitrary<Fault[]> = fc.array(quickFault, { minLength: 2, maxLength: 6 });
const caseArb = fc.oneof(
  fc.record({ script: onceArb, budgeted: fc.boolean(), cycle: fc.constant(false) }),
  fc.record({ script: cycleArb, budgeted: fc.boolean(), cycle: fc.constant(true) }),
);

const e500: Fault = { kind: "status", status: 500 };
/**
 * Scripts that are always played besides the drawn ones: the first release's loop (an answer
 * with NUL bytes, then failures); a model that asks for a tool nobody has, under a new name
 * each run, before every run's requests fail (a refused call is not a tool that ran); 500s
 * for ever against `agent.budget.maxModelCalls`.
 */
const FIXED: { script: Fault[]; budgeted: boolean; cycle: boolean; tools?: string[] }[] = [
  { script: [{ kind: "nul" }, e500], budgeted: false, cycle: false },
  { script: [{ kind: "unknown_tool" }, e500, e500, e500, e500], budgeted: false, cycle: true },
  // A tool that really runs before each run's requests fail, its result new each time: every
  // automatic resume made progress, so the attempt count started again each time, and only
  // `maxTurns` automatic resumes per request (resume-policy.ts) bound it.
  {
    script: [{ kind: "new_failure" }, e500, e500, e500, e500],
    budgeted: false,
    cycle: true,
    tools: ["fail"],
  },
  // Failures for ever, on a budget: every retry is a model call (exactly MAX_MODEL_CALLS requests).
  { script: [e500], budgeted: true, cycle: false },
];

type Case = {
  key: string;
  family: Family;
  script: Fault[];
  budgeted: boolean;
  cycle: boolean;
  /** The agent's tools: none unless a fixed script says (every call the model asks for is refused). */
  tools?: string[];
  id?: string;
};

describe("hostile model endpoints", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let sweeper: RunningSweeper;
  let worker: WorkerProcess;
  let endpoint: HostileEndpoint;

  beforeAll(async () => {
    endpoint = await startHostileEndpoint();
    fleet = await createFleetEnv("hostile", { env: { FLEET_ALLOWED_BASE_URLS: endpoint.origin } });
    ({ client } = await fleet.startApi());
    sweeper = await startSweeper(
      {
        ...loadConfig({ ...fleet.env, ...TUNING }),
        logLevel: (process.env.HOSTILE_LOG ?? "silent") as "silent",
      },
      { serveMetrics: false },
    );
    worker = await fleet.spawnWorker({ ...TUNING, WORKER_CONCURRENCY: "8", WORKER_RESUME_CONCURRENCY: "8" });
  }, 90_000);

  afterAll(async () => {
    await sweeper?.stop();
    await fleet?.close();
    await endpoint?.close();
  });

  function modelOf(family: Family) {
    switch (family) {
      case "chat":
        return { provider: "openai", model: "m", baseUrl: `${endpoint.origin}/v1` };
      case "responses":
        return { provider: "openai", api: "responses", model: "m", baseUrl: `${endpoint.origin}/v1` };
      case "anthropic":
        return { provider: "anthropic", model: "m", baseUrl: endpoint.origin };
    }
  }

  it(
    "ends every session completed or parked with a contract reason, within its request bound",
    async () => {
      const families: Family[] = ["chat", "responses", "anthropic"];
      const drawn = fc.sample(caseArb, { numRuns: PER_FAMILY * families.length, seed: SEED });
      const fixed = FIXED.flatMap((c) => families.map(() => c));
      const cases: Case[] = [...fixed, ...drawn].map((c, i) => ({
        ...c,
        key: `s${i}`,
        family: families[i % families.length]!,
      }));
      for (const c of cases) {
        endpoint.script(c.key, c.script, c.cycle);
        const { id } = await client.createSession({
          agent: {
            model: modelOf(c.family),
            // No tool unless the script needs one: every call the model asks for is refused, none runs.
            tools: c.tools ?? [],
            maxTurns: MAX_TURNS,
            ...(c.budgeted ? { budget: { maxModelCalls: MAX_MODEL_CALLS } } : {}),
          } as never,
        });
        c.id = id;
        await client.send(id, `HOSTILE-${c.key}- please answer`);
      }

      const sessions = new Map<string, SessionJson>();
      const terminal = (s: SessionJson) => s.status === "completed" || s.status === "parked";
      await waitFor(
        async () => {
          for (const c of cases) {
            if (sessions.has(c.key)) continue;
            const s = await client.getSession(c.id!);
            if (terminal(s)) sessions.set(c.key, s);
          }
          return sessions.size === cases.length;
        },
        TERMINAL_BOUND_MS,
        "every session completed or parked",
      ).catch(() => {});
      // Requests still in flight when a session was parked are counted too.
      await new Promise((r) => setTimeout(r, 500));

      const problems: string[] = [];
      for (const c of cases) {
        const s = sessions.get(c.key) ?? (await client.getSession(c.id!));
        const requests = endpoint.requests.get(c.key) ?? 0;
        const bound = requestBound(c.budgeted);
        const why: string[] = [];
        if (!terminal(s)) why.push(`not terminal: ${s.status}`);
        if (s.status === "parked") {
          const reason = (s.parkedReason ?? "").split(":")[0]!;
          if (!(PARK_REASONS as readonly string[]).includes(reason))
            why.push(`parked for "${s.parkedReason}"`);
        }
        if (requests > bound) why.push(`${requests} requests > bound ${bound}`);
        const seqs = s.messages.map((m) => m.seq);
        if (seqs.some((seq, i) => seq !== i + 1)) why.push(`seqs ${seqs.join(",")}`);
        if (why.length > 0)
          problems.push(
            `${c.key} ${c.family}${c.budgeted ? " budgeted" : ""}${c.cycle ? " cycling" : ""}: ${why.join("; ")}\n` +
              `  script ${JSON.stringify(c.script)}\n  served ${(endpoint.served.get(c.key) ?? []).join(",")}\n` +
              `  parked ${s.parkedReason}; runs ${s.runs.map((r) => `${r.kind}/${r.trigger}:${r.endedReason}`).join(" ")}`,
          );
      }
      if (process.env.HOSTILE_VERBOSE)
        for (const c of cases)
          console.log(
            c.key,
            c.family,
            c.budgeted,
            c.cycle,
            endpoint.requests.get(c.key),
            sessions.get(c.key)?.parkedReason ?? sessions.get(c.key)?.status,
            JSON.stringify(c.script),
          );
      expect(problems, problems.join("\n")).toEqual([]);
      expect(endpoint.unmarked).toBe(0);

      // The worker is alive and serving.
      expect(worker.child.exitCode).toBeNull();
      endpoint.script("alive", [{ kind: "ok" }]);
      const { id } = await client.createSession({ agent: { model: modelOf("chat") } as never });
      const { runId } = await client.send(id, "HOSTILE-alive- still there?");
      const run = await client.waitForRun(runId, { timeoutMs: 15_000 });
      expect(run.endedReason).toBe("completed");
    },
    TERMINAL_BOUND_MS + 40_000,
  );
});
