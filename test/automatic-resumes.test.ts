/**
 * The one way an automatic resume comes to be (store/automatic-resumes.ts), against a real
 * Postgres: progress starts the count again, no progress is counted and parks past the
 * limit with the last real reason, concurrent callers make one resume, and re-added jobs
 * count against the same limit. Also: which failed writes count as "storage rejected".
 */
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { parseAgentConfig } from "../src/shared/agent-config.js";
import { crashToResumeSeconds } from "../src/shared/crash-clock.js";
import type { Message } from "../src/shared/messages.js";
import { createMetrics } from "../src/shared/metrics.js";
import {
  CANCELLED_BEFORE_START_TEXT,
  CANCELLED_WHILE_RUNNING_PREFIX,
  INTERRUPTED_TOOL_TEXT,
  INVALID_ARGUMENTS_PREFIX,
  unavailableToolText,
} from "../src/shared/resume-plan.js";
import { DEFAULT_RESUME_POLICY } from "../src/shared/resume-policy.js";
import { PRIMARY_REJECTED_PREFIX, WORKER_STOPPED_ERROR } from "../src/shared/run-outcomes.js";
import { AutomaticResumes } from "../src/shared/store/automatic-resumes.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { SweepQueries } from "../src/sweeper/sweep-queries.js";
import { storageRejection } from "../src/worker/run-outcome.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const agent = parseAgentConfig({
  model: { provider: "scripted", steps: [{ text: "x" }] },
  tools: ["write_file"],
});
const call = { id: "c", name: "write_file", arguments: { path: "a", content: "a" } };
const asked: Message[] = [
  { role: "user", content: "write" },
  { role: "assistant", content: "", toolCalls: [call], stopReason: "tool_use" },
];
const policy = { ...DEFAULT_RESUME_POLICY, maxAttempts: 3, backoffBaseMs: 1_000 };

describe("AutomaticResumes", () => {
  let fleet: FleetEnv;
  let queries: SessionQueries;
  let resumes: AutomaticResumes;
  let metrics: ReturnType<typeof createMetrics>;

  beforeAll(async () => {
    fleet = await createFleetEnv("autoresumes");
    queries = new SessionQueries(fleet.database);
    metrics = createMetrics("test");
    resumes = new AutomaticResumes(fleet.database, policy, metrics);
  });
  afterAll(async () => {
    await fleet?.close();
  });

  /** A session a run left with this history (its last run ended `crashed`). */
  async function session(messages: Message[]): Promise<string> {
    const { id } = await queries.createSession({ agent, messages });
    await fleet.database.sql`update sessions set run_started = true where id = ${id}`;
    await endRuns(id);
    return id;
  }

  /** Ends the session's runs `crashed`, as the sweeper does when their worker died. */
  async function endRuns(id: string): Promise<void> {
    await fleet.database.sql`
      insert into runs (id, session_id, kind, trigger, status, ended_reason, ended_at)
      values (${`ended-${id}-${Math.random()}`}, ${id}, 'run', 'api', 'ended', 'crashed', now())`;
    await fleet.database.sql`
      update runs set status = 'ended', ended_reason = 'crashed', ended_at = now()
       where session_id = ${id} and status <> 'ended'`;
  }

  async function row(id: string) {
    const [s] = await fleet.database.sql<
      { status: string; parked_reason: string | null; resume_attempts: number }[]
    >`
      select status, parked_reason, resume_attempts from sessions where id = ${id}`;
    return s!;
  }

  it("a session stuck at the same point is counted each time and parked past the limit, with the last reason", async () => {
    const id = await session(asked);
    // A number, not the series: prom-client hands out the live objects, already at 0.
    const parkedNow = async () =>
      (await metrics.sessionsParked.get()).values.find((v) => v.labels.reason === "attempts_exhausted")
        ?.value ?? 0;
    const before = await parkedNow();
    for (let attempt = 1; attempt <= 3; attempt++) {
      const scheduled = await resumes.schedule({
        sessionId: id,
        trigger: attempt % 2 ? "sweeper" : "worker",
      });
      expect(scheduled).toMatchObject({ action: "resume", attempt });
      // The resume answers the call as interrupted; the model asks again under a new id; the
      // worker dies inside the same tool again: the same point, whatever was appended.
      const n = attempt;
      await fleet.database.sql`
        insert into messages (session_id, seq, role, content, tool_call_id, call_seq, name, success)
        values (${id}, ${1 + 2 * n}, 'tool', ${INTERRUPTED_TOOL_TEXT}, ${n === 1 ? "c" : `c${n - 1}`}, ${2 * n}, 'write_file', false)`;
      await fleet.database.sql`
        insert into messages (session_id, seq, role, content, tool_calls, stop_reason)
        values (${id}, ${2 + 2 * n}, 'assistant', '', ${JSON.stringify([{ ...call, id: `c${n}` }])}::jsonb, 'tool_use')`;
      await fleet.database
        .sql`update sessions set last_seq = ${2 + 2 * n}, tail_state = 'tools_pending' where id = ${id}`;
      await endRuns(id);
    }
    expect(await resumes.schedule({ sessionId: id, trigger: "sweeper" })).toMatchObject({
      action: "park",
      reason: "attempts_exhausted",
    });
    expect(await row(id)).toMatchObject({
      status: "parked",
      parked_reason: "attempts_exhausted: 3 automatic resumes made no progress; the last run ended crashed",
    });
    expect((await parkedNow()) - before).toBe(1);
    // Parked: nothing more is scheduled.
    expect(await resumes.schedule({ sessionId: id, trigger: "sweeper" })).toEqual({ action: "none" });
  });

  it("a worker's hand-over at shutdown is not counted, up to maxHandovers; then it counts like a crash", async () => {
    const bounded = new AutomaticResumes(
      fleet.database,
      { ...policy, maxAttempts: 1, maxHandovers: 2 },
      metrics,
    );
    const id = await session(asked);
    /** The queued resume starts, and its worker stops gracefully while it runs (end-run.ts). */
    const stopWorker = () => fleet.database.sql`
      update runs set status = 'ended', ended_reason = 'cancelled', error = ${WORKER_STOPPED_ERROR},
                      started_at = now(), ended_at = now()
       where session_id = ${id} and status <> 'ended'`;
    // A crash: the one attempt SWEEPER_MAX_ATTEMPTS allows here.
    expect(await bounded.schedule({ sessionId: id, trigger: "sweeper" })).toMatchObject({
      action: "resume",
      attempt: 1,
      delayMs: 0,
    });
    for (let stop = 1; stop <= 2; stop++) {
      await stopWorker();
      expect(await bounded.schedule({ sessionId: id, trigger: "worker" }), `stop ${stop}`).toMatchObject({
        action: "resume",
        attempt: 1,
        delayMs: 0,
      });
      expect(await row(id)).toMatchObject({ status: "active", resume_attempts: 1 });
    }
    // A stop with the same error text on a run that ended otherwise is no hand-over.
    await stopWorker();
    await fleet.database
      .sql`update runs set ended_reason = 'crashed' where session_id = ${id} and ended_reason = 'cancelled'
      and ended_at = (select max(ended_at) from runs where session_id = ${id})`;
    expect(await bounded.schedule({ sessionId: id, trigger: "sweeper" })).toMatchObject({
      action: "park",
      reason: "attempts_exhausted",
    });
    expect((await row(id)).parked_reason).toBe(
      "attempts_exhausted: 1 automatic resumes made no progress; the last run ended crashed",
    );

    // Past maxHandovers the hand-over is counted: here the limit is reached, and it parks.
    const other = await session(asked);
    expect(await bounded.schedule({ sessionId: other, trigger: "sweeper" })).toMatchObject({ attempt: 1 });
    const stopOther = () => fleet.database.sql`
      update runs set status = 'ended', ended_reason = 'cancelled', error = ${WORKER_STOPPED_ERROR},
                      started_at = now(), ended_at = now()
       where session_id = ${other} and status <> 'ended'`;
    for (let stop = 1; stop <= 2; stop++) {
      await stopOther();
      expect(await bounded.schedule({ sessionId: other, trigger: "worker" })).toMatchObject({ attempt: 1 });
    }
    await stopOther();
    expect(await bounded.schedule({ sessionId: other, trigger: "worker" })).toMatchObject({
      action: "park",
      reason: "attempts_exhausted",
    });
    expect((await row(other)).parked_reason).toBe(
      "attempts_exhausted: 1 automatic resumes made no progress; the last run ended cancelled, past 3 hand-overs by stopping workers",
    );
  });

  it("a session that moved to another point starts the count again, at once", async () => {
    const id = await session(asked);
    for (let attempt = 1; attempt <= 2; attempt++) {
      expect(await resumes.schedule({ sessionId: id, trigger: "sweeper" })).toMatchObject({ attempt });
      await endRuns(id);
    }
    // The tool ran and its result is stored: the session now waits for the model.
    await fleet.database.sql`
      insert into messages (session_id, seq, role, content, tool_call_id, call_seq, name, success)
      values (${id}, 3, 'tool', 'wrote a', 'c', 2, 'write_file', true)`;
    await fleet.database
      .sql`update sessions set last_seq = 3, tail_state = 'awaiting_model' where id = ${id}`;
    const moved = await resumes.schedule({ sessionId: id, trigger: "worker" });
    expect(moved).toMatchObject({ action: "resume", attempt: 1 });
    expect(moved.action === "resume" && moved.run).toMatchObject({
      trigger: "worker",
      resumeKind: "call_model",
    });
    expect(moved.action === "resume" && moved.delayMs).toBe(0);
    expect(await row(id)).toMatchObject({ status: "active", resume_attempts: 1 });
  });

  it("a session whose point keeps changing but where no tool runs is still counted (answers that keep breaking)", async () => {
    const id = await session([{ role: "user", content: "answer" }]);
    expect(await resumes.schedule({ sessionId: id, trigger: "sweeper" })).toMatchObject({ attempt: 1 });
    await fleet.database.sql`
      insert into messages (session_id, seq, role, content, stop_reason)
      values (${id}, 2, 'assistant', 'half an ans', 'interrupted')`;
    await fleet.database.sql`update sessions set last_seq = 2, tail_state = 'interrupted' where id = ${id}`;
    await endRuns(id);
    expect(await resumes.schedule({ sessionId: id, trigger: "sweeper" })).toMatchObject({
      attempt: 2,
      run: { resumeKind: "retry_response" },
    });
  });

  it("continueOnPause: false parks a run that ended paused, and resumes one that crashed after a pause below the limit", async () => {
    const noContinue = parseAgentConfig({
      model: { provider: "scripted", steps: [{ text: "x" }] },
      continueOnPause: false,
    });
    const paused: Message[] = [
      { role: "user", content: "find it" },
      { role: "assistant", content: "Looking.", stopReason: "paused" },
    ];
    const endedAs = async (outcome: string) => {
      const { id } = await queries.createSession({ agent: noContinue, messages: paused });
      await fleet.database.sql`update sessions set run_started = true where id = ${id}`;
      await fleet.database.sql`
        insert into runs (id, session_id, kind, trigger, status, ended_reason, ended_at)
        values (${`ended-${id}`}, ${id}, 'run', 'api', 'ended', ${outcome}, now())`;
      return id;
    };
    // The run reached the pause limit: the agent said not to continue, so it is parked.
    const atLimit = await endedAs("paused");
    expect(await resumes.schedule({ sessionId: atLimit, trigger: "sweeper" })).toEqual({
      action: "park",
      reason: "paused",
    });
    // The worker died while the loop continued a pause below the limit: a crash, resumed.
    const crashed = await endedAs("crashed");
    expect(await resumes.schedule({ sessionId: crashed, trigger: "sweeper" })).toMatchObject({
      action: "resume",
      attempt: 1,
      run: { resumeKind: "call_model" },
    });
    expect(await row(crashed)).toMatchObject({ status: "active", parked_reason: null });
  });

  it("a tool that ran to its end counts as progress whatever its output says; the runtime's own answers do not", async () => {
    const closeAndAskAgain = async (id: string, result: { content: string; success: boolean }, n: number) => {
      // The result of call `c`, then the model asks for another call (the session moved on).
      const next = { ...call, id: `c${n}`, arguments: { path: "b", content: "b" } };
      await fleet.database.sql`
        insert into messages (session_id, seq, role, content, tool_call_id, call_seq, name, success)
        values (${id}, ${1 + 2 * n}, 'tool', ${result.content}, 'c', ${2 * n}, 'write_file', ${result.success})`;
      await fleet.database.sql`
        insert into messages (session_id, seq, role, content, tool_calls, stop_reason)
        values (${id}, ${2 + 2 * n}, 'assistant', '', ${JSON.stringify([next])}::jsonb, 'tool_use')`;
      await fleet.database
        .sql`update sessions set last_seq = ${2 + 2 * n}, tail_state = 'tools_pending' where id = ${id}`;
      await endRuns(id);
    };
    // A tool whose own output starts with "Cancelled" ran to its end: the count starts again.
    const ran = await session(asked);
    expect(await resumes.schedule({ sessionId: ran, trigger: "sweeper" })).toMatchObject({ attempt: 1 });
    await closeAndAskAgain(ran, { content: "Cancelled order 42 as asked", success: true }, 1);
    expect(await resumes.schedule({ sessionId: ran, trigger: "sweeper" })).toMatchObject({
      action: "resume",
      attempt: 1,
    });
    // A call the runtime answered as cancelled (a shutdown's abort, a cancel) ran no tool to its
    // end; nor did one it refused (a tool the agent does not list, under a name a hostile model
    // invents anew each run; arguments the tool's schema rejects).
    for (const content of [
      CANCELLED_BEFORE_START_TEXT,
      `${CANCELLED_WHILE_RUNNING_PREFIX}the operation was aborted`,
      INTERRUPTED_TOOL_TEXT,
      unavailableToolText("no_such_tool_7"),
      `${INVALID_ARGUMENTS_PREFIX}path: expected string, received undefined`,
    ]) {
      const cut = await session(asked);
      expect(await resumes.schedule({ sessionId: cut, trigger: "sweeper" })).toMatchObject({ attempt: 1 });
      await closeAndAskAgain(cut, { content, success: false }, 1);
      expect(await resumes.schedule({ sessionId: cut, trigger: "sweeper" })).toMatchObject({
        action: "resume",
        attempt: 2,
      });
    }
  });

  it("waits out the backoff of the previous attempt", async () => {
    const id = await session(asked);
    expect(await resumes.schedule({ sessionId: id, trigger: "sweeper" })).toMatchObject({ attempt: 1 });
    await endRuns(id);
    const second = await resumes.schedule({ sessionId: id, trigger: "worker" });
    expect(second).toMatchObject({ action: "resume", attempt: 2 });
    expect(second.action === "resume" && second.delayMs).toBeGreaterThan(500);
  });

  it("fleet_crash_to_resume_seconds leaves out the backoff a resume waits on purpose", async () => {
    // A backoff well past FleetCrashToResumeSlow's 7.5 s, as a crash loop reaches at its 4th attempt.
    const backedOff = new AutomaticResumes(fleet.database, { ...policy, backoffBaseMs: 20_000 }, metrics);
    const id = await session(asked);
    const signOf = async (runId: string) => {
      const [r] = await fleet.database.sql<{ at: string }[]>`
        select to_json(last_sign_at) as at from runs where id = ${runId}`;
      return new Date(r!.at);
    };
    // The first resume: no backoff, the clock starts at the crashed run's last sign of life.
    const crash1 = new Date(Date.now() - 3_000);
    const first = await backedOff.schedule({ sessionId: id, trigger: "sweeper", lastSignAt: crash1 });
    if (first.action !== "resume") throw new Error(`expected a resume, got ${first.action}`);
    expect(first.delayMs).toBe(0);
    expect((await signOf(first.run.id)).getTime()).toBe(crash1.getTime());
    // It crashed too, 3 s ago, just noticed: the second waits out the first one's backoff.
    await endRuns(id);
    const crash2 = new Date(Date.now() - 3_000);
    const decidedAt = Date.now();
    const second = await backedOff.schedule({ sessionId: id, trigger: "sweeper", lastSignAt: crash2 });
    if (second.action !== "resume") throw new Error(`expected a resume, got ${second.action}`);
    expect(second.attempt).toBe(2);
    expect(second.delayMs).toBeGreaterThan(10_000);
    const sign2 = await signOf(second.run.id);
    expect(sign2.getTime() - crash2.getTime()).toBe(second.delayMs);
    // Its worker starts it once the delay has passed, and observes the time to notice the
    // crash (3 s), not that plus the backoff.
    const startedAt = decidedAt + second.delayMs;
    const observed = crashToResumeSeconds(sign2, startedAt);
    console.log(
      `2nd attempt: backoff ${second.delayMs} ms; observed ${observed} s, crash to start ${(startedAt - crash2.getTime()) / 1000} s`,
    );
    expect(observed).toBe((decidedAt - crash2.getTime()) / 1000);
  });

  it("does nothing while a run is queued or running, and concurrent callers make one resume", async () => {
    const id = await session(asked);
    const results = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        resumes.schedule({ sessionId: id, trigger: i % 2 ? "worker" : "sweeper" }),
      ),
    );
    expect(results.filter((r) => r.action === "resume")).toHaveLength(1);
    expect(results.filter((r) => r.action === "none")).toHaveLength(5);
    const [n] = await fleet.database.sql<{ n: number }[]>`
      select count(*)::int as n from runs where session_id = ${id} and kind = 'resume'`;
    expect(n!.n).toBe(1);
  });

  it("a primary its provider refused for good goes to the first fallback whoever schedules: the sweeper may see the run's end before its worker asks", async () => {
    const fallback = { provider: "scripted" as const, steps: [{ text: "from fallback" }] };
    const withFallback = parseAgentConfig({
      model: { provider: "scripted", steps: [{ fault: "rejected" }] },
      fallbackModels: [fallback],
    });
    const ended = async (error: string) => {
      const { id } = await queries.createSession({
        agent: withFallback,
        messages: [{ role: "user", content: "hi" }],
      });
      await fleet.database.sql`update sessions set run_started = true where id = ${id}`;
      await fleet.database.sql`
        insert into runs (id, session_id, kind, trigger, status, ended_reason, error, ended_at)
        values (${`ended-${id}`}, ${id}, 'run', 'api', 'ended', 'provider_error', ${error}, now())`;
      return id;
    };
    // The worker stored the refusal as such: the sweeper's resume is on the fallback, counted
    // as the worker's own request would be.
    const refused = await resumes.schedule({
      sessionId: await ended(`${PRIMARY_REJECTED_PREFIX}401 bad key`),
      trigger: "sweeper",
    });
    expect(refused).toMatchObject({ action: "resume", attempt: policy.fallbackAfter + 1 });
    expect(refused.action === "resume" && refused.run.model).toEqual(fallback);
    // Any other provider error: the primary again, first.
    const other = await resumes.schedule({ sessionId: await ended("503 overloaded"), trigger: "sweeper" });
    expect(other).toMatchObject({ action: "resume", attempt: 1 });
    expect(other.action === "resume" && other.run.model).toBeNull();
  });

  it("the sweeper's scan skips an imported history that never ran, and sees one a run touched", async () => {
    const { id: imported } = await queries.createSession({ agent, messages: asked });
    const touched = await session(asked);
    const seen = (await new SweepQueries(fleet.database).sessionsNeedingAttention(1_000)).map((s) => s.id);
    expect(seen).toContain(touched);
    expect(seen).not.toContain(imported);
  });

  it("re-added jobs count against the same limit and park past it", async () => {
    const id = await session(asked);
    const { run } = await queries.createRun({ sessionId: id, kind: "run", trigger: "api", input: "again" });
    for (let i = 1; i <= 3; i++)
      expect(await resumes.countRetry(id, run.id, `job@${i}`)).toMatchObject({ action: "retry" });
    // The same attempt asked again (its answer lost) is the same retry: counted once.
    expect(await resumes.countRetry(id, run.id, "job@3")).toMatchObject({ action: "retry" });
    expect((await row(id)).resume_attempts).toBe(3);
    expect(await resumes.countRetry(id, run.id, "job@4")).toMatchObject({
      action: "park",
      reason: "attempts_exhausted",
    });
    expect((await row(id)).status).toBe("parked");
  });

  it("a run that started since the sweeper looked is not a retry: nothing is counted", async () => {
    const id = await session(asked);
    const { run } = await queries.createRun({ sessionId: id, kind: "run", trigger: "api", input: "again" });
    await fleet.database.sql`update runs set status = 'running', started_at = now() where id = ${run.id}`;
    expect(await resumes.countRetry(id, run.id, "job@1")).toEqual({ action: "none" });
    expect((await row(id)).resume_attempts).toBe(0);
  });

  it("a write Postgres refuses for its content is storage_rejected; a lost connection is not", async () => {
    const nul = await fleet.database.sql`select ${"a\u0000b"}::text`.catch((error: unknown) => error);
    expect(storageRejection(nul)).toBe("storage_rejected");
    const tooBig = await fleet.database.sql`select 2147483648::int`.catch((error: unknown) => error);
    expect(storageRejection(tooBig)).toBe("storage_rejected");
    expect(
      storageRejection(Object.assign(new Error("write CONNECTION_CLOSED"), { code: "CONNECTION_CLOSED" })),
    ).toBeNull();
    expect(
      storageRejection(Object.assign(new Error("terminating connection"), { code: "57P01" })),
    ).toBeNull();
  });

  it("schedules on Postgres's clock: a host whose clock is off neither delays nor skips the backoff", async () => {
    const tenMinutes = 10 * 60_000;
    const ahead = await session(asked);
    const behind = await session(asked);
    // The second attempt of `behind` waits for the backoff its first one set (1 s here).
    expect((await resumes.schedule({ sessionId: behind, trigger: "sweeper" })).action).toBe("resume");
    await endRuns(behind);
    // Only Date is faked: timers and sockets run as usual, so this is a host whose clock is off.
    vi.useFakeTimers({ toFake: ["Date"], shouldAdvanceTime: true });
    try {
      vi.setSystemTime(Date.now() + tenMinutes);
      const fast = new AutomaticResumes(fleet.database, policy, metrics);
      expect((await fast.schedule({ sessionId: ahead, trigger: "sweeper" })).action).toBe("resume");
      vi.setSystemTime(Date.now() - 2 * tenMinutes);
      const slow = new AutomaticResumes(fleet.database, policy, metrics);
      const late = await slow.schedule({ sessionId: behind, trigger: "sweeper" });
      expect(late.action).toBe("resume");
      // The rest of the backoff, not the backoff plus the ten minutes the host is behind.
      if (late.action === "resume") expect(late.delayMs).toBeLessThanOrEqual(1_000);
    } finally {
      vi.useRealTimers();
    }
    // The sweeper looks again (`next_resume_at <= now()` in Postgres) after the backoff, not
    // after the backoff plus the ten minutes the first host was ahead.
    const [wait] = await fleet.database.sql<{ s: number }[]>`
      select extract(epoch from next_resume_at - now())::float as s from sessions where id = ${ahead}`;
    expect(wait!.s).toBeLessThanOrEqual(1);
  });
});
