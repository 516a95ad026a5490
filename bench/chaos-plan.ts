/**
 * What a chaos run will do, decided up front from one seed (pure): the sessions' scripts,
 * when each wave of sessions is submitted, and the schedule of faults. The same seed gives
 * the same plan, so a run that found something can be repeated.
 */
import type { AgentConfigInput, ScriptedStep } from "../src/shared/agent-config.js";
import { appendTarget } from "./chaos-checks.js";

/** mulberry32: small, fast, good enough to spread faults; deterministic per seed. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

type Rng = () => number;
const between = (rng: Rng, lo: number, hi: number) => lo + Math.floor(rng() * (hi - lo + 1));

export type ChaosOptions = {
  sessions: number;
  seed: number;
  /** The deadline: chaos stops then (or earlier, once every session has settled). */
  timeoutMs: number;
  workers: number;
  sweepers: number;
  /** Multiplies every fault rate. */
  chaosRate: number;
  /** The fleet's LEASE_TTL_MS: freezes are spread around it. */
  leaseTtlMs: number;
};

export type SessionPlan = { label: string; wave: number; agent: AgentConfigInput; input: string };

export type ChaosEvent =
  | { atMs: number; action: "kill" | "stop"; role: "worker" | "sweeper"; slot: number; stopMs: number }
  | { atMs: number; action: "pg_terminate" }
  | { atMs: number; action: "redis_restart"; downMs: number };

export type ChaosPlan = {
  sessions: SessionPlan[];
  /** When each wave is submitted, ms after the start. */
  waveAtMs: number[];
  events: ChaosEvent[];
};

/** Faults per minute of chaos, before `chaosRate`. */
export const RATES_PER_MINUTE = {
  workerKill: 8,
  workerStop: 6,
  sweeperKill: 2,
  sweeperStop: 2,
  pgTerminate: 4,
} as const;

/**
 * A session's script: 2–4 tool steps, each an append_file with a line of its own (call id
 * `a<k>`) and usually a sleep (`z<k>`, so kills land inside tools), in either order, often
 * with a `chaos_mark` (`m<k>`) that records when it started; some
 * steps fail before output (`connection`, retried inside the run, or often enough that the
 * run ends `provider_error`) or are cut mid-stream (`stream_cut`, an `interrupted`
 * response); then the answer `done <label>`.
 */
export function sessionScript(label: string, rng: Rng): ScriptedStep[] {
  const steps: ScriptedStep[] = [];
  const toolSteps = between(rng, 2, 4);
  const hardFault = rng() < 0.05 ? between(rng, 0, toolSteps - 1) : -1;
  for (let t = 0; t < toolSteps; t++) {
    if (rng() < 0.12) {
      // Cut after some text: its calls never run; the next step is used on the resume.
      const k = steps.length;
      steps.push({
        text: `${label} thinking about step ${k} before acting on it`,
        toolCalls: [{ id: `a${k}`, name: "append_file", arguments: { ...appendArgs(label, `a${k}`) } }],
        fault: "stream_cut",
        faultTimes: 1,
        delayMs: between(rng, 20, 200),
      });
    }
    const k = steps.length;
    const append = { id: `a${k}`, name: "append_file", arguments: { ...appendArgs(label, `a${k}`) } };
    const nap = { id: `z${k}`, name: "sleep", arguments: { ms: between(rng, 150, 1_500) } };
    const roll = rng();
    const toolCalls: NonNullable<ScriptedStep["toolCalls"]> =
      roll < 0.15 ? [append] : roll < 0.55 ? [append, nap] : [nap, append];
    if (rng() < 0.6) {
      // A call that records its own start (bench/chaos-tools.ts), at a random place.
      const mark = { id: `m${k}`, name: "chaos_mark", arguments: { line: `${label} m${k}` } };
      toolCalls.splice(between(rng, 0, toolCalls.length), 0, mark);
    }
    const step: ScriptedStep = { toolCalls, delayMs: between(rng, 0, 250) };
    if (t === hardFault) Object.assign(step, { fault: "connection", faultTimes: 5 });
    else if (rng() < 0.15) Object.assign(step, { fault: "connection", faultTimes: between(rng, 1, 2) });
    steps.push(step);
  }
  steps.push({ text: `done ${label}`, delayMs: between(rng, 0, 100) });
  return steps;
}

function appendArgs(label: string, callId: string): { path: string; line: string } {
  return appendTarget(label, callId);
}

/**
 * How long a freeze lasts: a third shorter than the lease (the worker keeps its sessions), a
 * third just past it (the run is declared stalled and the frozen worker wakes while its
 * resume may not have been claimed yet: the window for late appends and late tools), a
 * third long (the resume has moved on by the time it wakes).
 */
function freezeMs(rng: Rng, leaseTtlMs: number): number {
  const roll = rng();
  if (roll < 1 / 3) return between(rng, 300, Math.max(300, leaseTtlMs - 300));
  if (roll < 2 / 3) return between(rng, leaseTtlMs, leaseTtlMs + 1_000);
  return between(rng, leaseTtlMs + 1_000, leaseTtlMs + 4_000);
}

/** Fault times uniformly spread over [from, to), `count` of them, sorted. */
function spread(rng: Rng, count: number, from: number, to: number): number[] {
  return Array.from({ length: count }, () => Math.round(from + rng() * (to - from))).sort((a, b) => a - b);
}

/** Rounds `x` to an integer count, keeping the fractional part as a probability. */
function countOf(rng: Rng, x: number): number {
  return Math.floor(x) + (rng() < x - Math.floor(x) ? 1 : 0);
}

export function planChaos(options: ChaosOptions): ChaosPlan {
  const rng = seededRandom(options.seed);
  // Sessions arrive in waves over the first 40% of the deadline, so there is always work in
  // flight while faults land; faults fall between 1.5 s and 80% of the deadline.
  const submitWindowMs = Math.max(1_000, options.timeoutMs * 0.4);
  const waves = Math.max(1, Math.min(options.sessions, Math.round(submitWindowMs / 1_000)));
  const waveAtMs = Array.from({ length: waves }, (_, w) => Math.round((w * submitWindowMs) / waves));
  const sessions: SessionPlan[] = Array.from({ length: options.sessions }, (_, i) => {
    const label = `c${i}`;
    return {
      label,
      wave: Math.floor((i * waves) / options.sessions),
      agent: {
        model: { provider: "scripted", steps: sessionScript(label, rng) },
        tools: ["append_file", "sleep", "chaos_mark"],
        maxTurns: 20,
      },
      input: `Chaos session ${label}: do your steps.`,
    };
  });

  const from = 1_500;
  const to = Math.max(from + 1_000, options.timeoutMs * 0.8);
  const minutes = ((to - from) / 60_000) * options.chaosRate;
  const events: ChaosEvent[] = [];
  const add = (
    count: number,
    make: (atMs: number) => ChaosEvent,
    window: [number, number] = [from, to],
  ): void => {
    for (const atMs of spread(rng, count, window[0], window[1])) events.push(make(atMs));
  };
  const victim = (action: "kill" | "stop", role: "worker" | "sweeper") => (atMs: number) => ({
    atMs,
    action,
    role,
    slot: between(rng, 0, (role === "worker" ? options.workers : options.sweepers) - 1),
    stopMs: action === "stop" ? freezeMs(rng, options.leaseTtlMs) : 0,
  });
  add(countOf(rng, RATES_PER_MINUTE.workerKill * minutes), victim("kill", "worker"));
  add(countOf(rng, RATES_PER_MINUTE.workerStop * minutes), victim("stop", "worker"));
  add(countOf(rng, RATES_PER_MINUTE.sweeperKill * minutes), victim("kill", "sweeper"));
  add(countOf(rng, RATES_PER_MINUTE.sweeperStop * minutes), victim("stop", "sweeper"));
  add(countOf(rng, RATES_PER_MINUTE.pgTerminate * minutes), (atMs) => ({ atMs, action: "pg_terminate" }));
  // Redis restarts: at least one, in the middle of the run (while sessions are in flight).
  const restarts = Math.max(1, Math.round(((to - from) / 120_000) * options.chaosRate));
  add(restarts, (atMs) => ({ atMs, action: "redis_restart", downMs: between(rng, 300, 2_000) }), [
    from + (to - from) * 0.15,
    from + (to - from) * 0.7,
  ]);
  events.sort((a, b) => a.atMs - b.atMs);
  return { sessions, waveAtMs, events };
}
