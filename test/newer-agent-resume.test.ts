/**
 * A rolling deploy, the sweeper's side: the sweeper is replaced last, so while newer APIs
 * store agents with fields this release does not know, an older sweeper (or an older
 * worker asking for a resume after a crash) schedules their sessions' automatic resumes.
 * AutomaticResumes.schedule parsed the agent strictly and parked the session `invalid_agent`
 * at once. Now it decides on the settings this release knows (no fallback models: their
 * MODELs may be what it cannot read), and queues the resume; its worker reads the whole agent,
 * or hands the run back for a newer worker (test/newer-agent-old-worker.test.ts). A genuinely
 * invalid agent is still parked at once. Real Postgres.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseAgentConfig } from "../src/shared/agent-config.js";
import type { Message } from "../src/shared/messages.js";
import { createMetrics } from "../src/shared/metrics.js";
import { DEFAULT_RESUME_POLICY } from "../src/shared/resume-policy.js";
import { AutomaticResumes } from "../src/shared/store/automatic-resumes.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const SCRIPTED = { provider: "scripted" as const, steps: [{ text: "x" }] };
const interrupted: Message[] = [{ role: "user", content: "go on" }];

describe("an automatic resume of a session whose agent a newer release wrote", () => {
  let fleet: FleetEnv;
  let queries: SessionQueries;
  let resumes: AutomaticResumes;

  beforeAll(async () => {
    fleet = await createFleetEnv("newer-agent-resume");
    queries = new SessionQueries(fleet.database);
    resumes = new AutomaticResumes(fleet.database, DEFAULT_RESUME_POLICY, createMetrics("test"));
  });
  afterAll(async () => {
    await fleet?.close();
  });

  /** A session whose run crashed after its user message, its stored agent `agent`. */
  async function crashedWith(agent: unknown): Promise<string> {
    const { id } = await queries.createSession({
      agent: parseAgentConfig({ model: SCRIPTED }),
      messages: interrupted,
    });
    await fleet.database.sql`
      update sessions set run_started = true, agent = ${JSON.stringify(agent)}::jsonb where id = ${id}`;
    await fleet.database.sql`
      insert into runs (id, session_id, kind, trigger, status, ended_reason, ended_at)
      values (${`ended-${id}`}, ${id}, 'run', 'api', 'ended', 'crashed', now())`;
    return id;
  }

  async function status(id: string): Promise<{ status: string; parked_reason: string | null }> {
    const [row] = await fleet.database.sql<{ status: string; parked_reason: string | null }[]>`
      select status, parked_reason from sessions where id = ${id}`;
    return row!;
  }

  it("is queued on the primary model, not parked", async () => {
    const id = await crashedWith({
      model: { ...SCRIPTED, newSetting: 1 },
      fallbackModels: [{ provider: "gemini", model: "g" }],
      maxTurns: 7,
    });
    const scheduled = await resumes.schedule({ sessionId: id, trigger: "sweeper" });
    expect(scheduled).toMatchObject({ action: "resume", attempt: 1 });
    expect(scheduled.action === "resume" && scheduled.run.model).toBeNull();
    expect(await status(id)).toEqual({ status: "active", parked_reason: null });
  });

  it("a genuinely invalid agent is parked at once, as before", async () => {
    const id = await crashedWith({ model: SCRIPTED, maxTurns: 0, newSetting: 1 });
    expect(await resumes.schedule({ sessionId: id, trigger: "sweeper" })).toMatchObject({
      action: "park",
      reason: "invalid_agent",
    });
    expect((await status(id)).parked_reason).toMatch(/^invalid_agent: agent/);
  });
});
