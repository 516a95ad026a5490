/**
 * The lease guard on a fake monotonic clock, and where the worker asks it: before each
 * write (guardedWrites) and before each tool start and append of the agent loop.
 */
import { describe, expect, it } from "vitest";
import { parseAgentConfig } from "../src/shared/agent-config.js";
import { FencedError } from "../src/shared/errors.js";
import type { StoredMessage } from "../src/shared/messages.js";
import type { Fence, FencedWrites } from "../src/shared/store/fenced-writes.js";
import { runAgentLoop } from "../src/worker/agent-loop.js";
import { guardedWrites, LeaseGuard, LeaseLapsedError } from "../src/worker/lease-guard.js";
import type { AgentLoopDeps } from "../src/worker/loop-types.js";
import type { ModelEvent, ModelProvider } from "../src/worker/models/provider.js";

const FENCE: Fence = { sessionId: "s1", epoch: 4 };

/** A guard on a clock the test moves by hand; TTL 1000 ms, margin 50 ms. */
function fakeGuard() {
  const clock = { now: 10_000 };
  const guard = new LeaseGuard("s1", 1_000, { marginMs: 50, now: () => clock.now });
  return { clock, guard };
}

describe("LeaseGuard", () => {
  it("is valid from a confirmed send until send time + TTL − margin, and not a moment longer", () => {
    const { clock, guard } = fakeGuard();
    expect(guard.isValid()).toBe(false); // nothing confirmed yet
    expect(() => guard.assertValid(FENCE.epoch)).toThrow(LeaseLapsedError);
    const sentAt = guard.stamp();
    clock.now += 400; // the reply takes 400 ms: validity still counts from the send
    guard.confirmed(sentAt);
    expect(guard.remainingMs()).toBe(550);
    clock.now = sentAt + 949;
    expect(() => guard.assertValid(FENCE.epoch)).not.toThrow();
    clock.now = sentAt + 950;
    expect(guard.isValid()).toBe(false);
    expect(() => guard.assertValid(FENCE.epoch)).toThrow(/last confirmed renewal was sent 950 ms ago/);
  });

  it("throws a FencedError for the session and epoch, so the worker handles it as one", () => {
    const { guard } = fakeGuard();
    try {
      guard.assertValid(7);
      expect.unreachable();
    } catch (error) {
      expect(error).toBeInstanceOf(FencedError);
      expect(error).toMatchObject({ sessionId: "s1", epoch: 7, name: "LeaseLapsedError" });
    }
  });

  it("takes the latest send among overlapping renewals; a late old reply does not shorten it", () => {
    const { clock, guard } = fakeGuard();
    const first = guard.stamp();
    clock.now += 300;
    const second = guard.stamp();
    guard.confirmed(second);
    guard.confirmed(first); // the older reply arrives last
    clock.now = second + 900;
    expect(guard.isValid()).toBe(true);
  });

  it("a refused renewal invalidates at once and for good, whatever arrives later", () => {
    const { clock, guard } = fakeGuard();
    guard.confirmed(guard.stamp());
    guard.lost();
    expect(() => guard.assertValid()).toThrow(/refused/);
    guard.confirmed(guard.stamp());
    clock.now += 1;
    expect(guard.isValid()).toBe(false);
  });

  it("after a freeze the check fails from the clock alone, before any renewal timer runs", () => {
    const { clock, guard } = fakeGuard();
    guard.confirmed(guard.stamp());
    clock.now += 3_000; // SIGSTOP … SIGCONT: no renewal has been sent, none has failed
    expect(() => guard.assertValid(FENCE.epoch)).toThrow(LeaseLapsedError);
  });

  it("defaults to a margin of 5% of the TTL (at least 25 ms) on performance.now", () => {
    const guard = new LeaseGuard("s1", 2_000);
    guard.confirmed(guard.stamp());
    expect(guard.remainingMs()).toBeGreaterThan(1_850);
    expect(guard.remainingMs()).toBeLessThanOrEqual(1_900);
    const short = new LeaseGuard("s1", 100);
    short.confirmed(short.stamp());
    expect(short.remainingMs()).toBeLessThanOrEqual(75);
  });
});

describe("LeaseGuard while Redis is unreachable (waitMs)", () => {
  function waitingGuard(waitMs: number) {
    const clock = { now: 10_000 };
    const guard = new LeaseGuard("s1", 1_000, { marginMs: 50, now: () => clock.now, waitMs });
    guard.confirmed(guard.stamp());
    clock.now += 2_000; // lapsed: no renewal got through
    return { clock, guard };
  }

  it("a lapsed lease waits for a renewal to prove it again, then goes on", async () => {
    const { clock, guard } = waitingGuard(60_000);
    let done = false;
    const waiting = guard.whenValid(4).then(() => {
      done = true;
    });
    await new Promise((r) => setTimeout(r, 20));
    expect(done).toBe(false);
    guard.confirmed(clock.now);
    await waiting;
    expect(done).toBe(true);
  });

  it("a waiting write or tool start throws once the lease is lost", async () => {
    const { guard } = waitingGuard(60_000);
    const waiting = guard.whenValid(4);
    guard.lost("the session's epoch moved");
    await expect(waiting).rejects.toThrow(/epoch moved/);
  });

  it("a wait does not keep the process alive (a job given up on by its worker's stop)", async () => {
    const timers = () => process.getActiveResourcesInfo().filter((kind) => kind === "Timeout").length;
    const before = timers();
    const { guard } = waitingGuard(60_000);
    const waiting = guard.whenValid(4);
    expect(timers()).toBe(before);
    guard.lost("test over");
    await expect(waiting).rejects.toThrow(/test over/);
  });

  it("gives up after waitMs, and without waitMs throws at once as before", async () => {
    await expect(waitingGuard(30).guard.whenValid(4)).rejects.toThrow(/cannot be proven/);
    await expect(waitingGuard(0).guard.whenValid(4)).rejects.toBeInstanceOf(LeaseLapsedError);
  });

  it("tells how long each wait took and how it ended (fleet_lease_wait_seconds); no wait, nothing", async () => {
    const waited: [number, string][] = [];
    const clock = { now: 10_000 };
    const guard = (waitMs: number) => {
      const g = new LeaseGuard("s1", 1_000, {
        marginMs: 50,
        now: () => clock.now,
        waitMs,
        onWaited: (seconds, result) => waited.push([seconds, result]),
      });
      g.confirmed(g.stamp());
      return g;
    };
    const valid = guard(60_000);
    await valid.whenValid(4); // proven: no wait
    expect(waited).toEqual([]);
    clock.now += 2_000; // lapsed
    const proving = valid.whenValid(4);
    clock.now += 1_500; // Redis answers 1.5 s later
    valid.confirmed(clock.now);
    await proving;
    await valid.whenValid(4); // valid again: no wait
    clock.now += 2_000;
    const lost = valid.whenValid(4);
    valid.lost("another holder");
    await expect(lost).rejects.toThrow(/another holder/);
    await guard(30).whenValid(4); // valid: no wait
    const lapsed = guard(30);
    clock.now += 2_000;
    await expect(lapsed.whenValid(4)).rejects.toThrow(/cannot be proven/);
    expect(waited.map(([, result]) => result)).toEqual(["proven", "lost", "timed_out"]);
    expect(waited[0]![0]).toBe(1.5);
    // Without waitMs nothing waits: nothing is told.
    const none = guard(0);
    clock.now += 2_000;
    await expect(none.whenValid(4)).rejects.toBeInstanceOf(LeaseLapsedError);
    expect(waited).toHaveLength(3);
  });

  it("taken back, it counts for nothing until the epoch check passes, whatever renewal answers", async () => {
    const { clock, guard } = fakeGuard();
    guard.confirmed(guard.stamp()); // still valid from before …
    const retakeSentAt = guard.stamp();
    guard.suspend(); // … but the key was gone: Redis may have lost it
    expect(guard.isValid()).toBe(false);
    expect(() => guard.assertValid()).toThrow(/epoch is not checked yet/);
    guard.confirmed(guard.stamp()); // a plain renewal answered meanwhile
    expect(guard.isValid()).toBe(false);
    clock.now += 100;
    guard.verified(retakeSentAt);
    expect(guard.remainingMs()).toBe(850);
  });
});

describe("guardedWrites", () => {
  it("refuses every write before it reaches the store once the lease cannot be proven", async () => {
    const { clock, guard } = fakeGuard();
    const sent: string[] = [];
    const record = (name: string) => async () => {
      sent.push(name);
      return null;
    };
    const store = {
      claimSession: record("claim"),
      append: record("append"),
      startRun: record("startRun"),
      endRun: record("endRun"),
      /** A write added later is guarded too: every method of the writes object is one. */
      reserveModelCall: record("reserve"),
    } as unknown as Pick<FencedWrites, "claimSession" | "append" | "startRun" | "endRun"> & {
      reserveModelCall(fence: Fence): Promise<null>;
    };
    const writes = guardedWrites(store, guard);
    const cursor = { lastSeq: 0, lastStepSeq: null };
    const run = { id: "r", workerId: "w", resumeKind: null };
    guard.confirmed(guard.stamp());
    await writes.claimSession("s1", "w");
    await writes.append(FENCE, cursor, "r", [], "empty");
    await writes.startRun(FENCE, cursor, run, [], "empty");
    await writes.endRun(FENCE, "r", "completed");
    await writes.reserveModelCall(FENCE);
    expect(sent).toEqual(["claim", "append", "startRun", "endRun", "reserve"]);
    clock.now += 1_000;
    await expect(writes.claimSession("s1", "w")).rejects.toBeInstanceOf(LeaseLapsedError);
    await expect(writes.append(FENCE, cursor, "r", [], "empty")).rejects.toBeInstanceOf(FencedError);
    await expect(writes.startRun(FENCE, cursor, run, [], "empty")).rejects.toBeInstanceOf(FencedError);
    await expect(writes.endRun(FENCE, "r", "completed")).rejects.toMatchObject({ epoch: 4 });
    await expect(writes.reserveModelCall(FENCE)).rejects.toBeInstanceOf(FencedError);
    expect(sent).toHaveLength(5);
  });
});

describe("the guard on the worker's hot path", () => {
  it("asks for a write at once while the lease is proven, through one function per method", async () => {
    const { clock, guard } = fakeGuard();
    guard.confirmed(guard.stamp());
    const sent: number[] = [];
    const store = {
      async append(fence: Fence) {
        sent.push(fence.epoch);
        return fence.epoch;
      },
    };
    const writes = guardedWrites(store, guard);
    expect(writes.append).toBe(writes.append);
    // Proven: no async wrapper and await between the call and the write's start.
    const answer = writes.append(FENCE);
    expect(sent).toEqual([4]);
    await expect(answer).resolves.toBe(4);
    clock.now += 1_000;
    await expect(writes.append(FENCE)).rejects.toBeInstanceOf(LeaseLapsedError);
    expect(sent).toEqual([4]);
  });

  it("answers whenValid with one settled promise while the lease is proven, and waits or throws as before otherwise", async () => {
    const { clock, guard } = fakeGuard();
    guard.confirmed(guard.stamp());
    // Asked before every write and every tool start: no async call made per question.
    expect(guard.whenValid(4)).toBe(guard.whenValid(4));
    await guard.whenValid(4);
    clock.now += 1_000;
    await expect(guard.whenValid(4)).rejects.toMatchObject({ name: "LeaseLapsedError", epoch: 4 });
  });
});

describe("runAgentLoop with a lease guard", () => {
  /**
   * One step asking for tools `first` then `second`; every append succeeds. The process
   * "freezes" for 5 s (the fake clock jumps) at the event named `freezeAt`.
   */
  function setup(freezeAt: string) {
    const log: string[] = [];
    const { clock, guard } = fakeGuard();
    guard.confirmed(guard.stamp());
    const event = (name: string) => {
      log.push(name);
      if (name === freezeAt) clock.now += 5_000;
    };
    let seq = 1;
    const model: ModelProvider = {
      async *stream(): AsyncGenerator<ModelEvent> {
        event("model");
        yield { type: "tool_call", call: { id: "first", name: "act", arguments: {} } };
        yield { type: "tool_call", call: { id: "second", name: "act", arguments: {} } };
        yield { type: "done", stopReason: "tool_use" };
      },
    };
    const deps: AgentLoopDeps = {
      writes: {
        reserveModelCall: async () => true,
        countBilledTokens: async () => {},
        async append(_fence, _cursor, _runId, messages) {
          return messages.map((m) => {
            seq++;
            event(`append:${m.role}`);
            return { ...m, seq, createdAt: new Date(0).toISOString() } as StoredMessage;
          });
        },
      },
      tools: {
        get: (name) => ({
          name,
          description: name,
          parameters: { type: "object" },
          run: async (_args, { callId }) => {
            event(`tool:${callId}`);
            return "ok";
          },
        }),
        specs: (names) => names.map((name) => ({ name, description: name, parameters: { type: "object" } })),
      },
      metrics: { modelStops: { inc() {} }, toolCalls: { inc() {} } } as unknown as AgentLoopDeps["metrics"],
      sleep: async () => {},
      leaseGuard: guard,
    };
    const history: StoredMessage[] = [
      { role: "user", content: "go", seq: 1, createdAt: new Date(0).toISOString() },
    ];
    const agent = {
      ...parseAgentConfig({ model: { provider: "scripted", steps: [{ text: "x" }] } }),
      tools: ["act"],
    };
    const signal = new AbortController().signal;
    return {
      log,
      run: () => runAgentLoop({ fence: FENCE, runId: "r", agent, model, history, signal }, deps),
    };
  }

  it("starts no tool once the lease lapsed, even right after an append that succeeded", async () => {
    // Frozen while the first result's append was in flight: the append landed, then nothing.
    const { log, run } = setup("append:tool");
    await expect(run()).rejects.toBeInstanceOf(LeaseLapsedError);
    expect(log).toEqual(["model", "append:assistant", "tool:first", "append:tool"]);
  });

  it("appends nothing once the lease lapsed while a tool ran", async () => {
    const { log, run } = setup("tool:first");
    await expect(run()).rejects.toBeInstanceOf(FencedError);
    expect(log).toEqual(["model", "append:assistant", "tool:first"]);
  });

  it("appends no model step once the lease lapsed during the model call", async () => {
    const { log, run } = setup("model");
    await expect(run()).rejects.toBeInstanceOf(FencedError);
    expect(log).toEqual(["model"]);
  });
});
