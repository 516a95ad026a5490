/**
 * The labels a resume leaves in the metrics (contracts §6) for every row of resume-semantics §2,
 * against the real API, Postgres, Redis and a `fleet worker` child: each refused resume is
 * counted once under its reason (the six of §2, and `running`), each resume a worker starts
 * once under its kind and trigger, and each call a `recover_tools` resume answers as
 * interrupted once under its tool, `interrupted` — with no tool run.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetApiError, FleetClient } from "../src/producer/client.js";
import type { Message } from "../src/shared/messages.js";
import { NOT_RESUMABLE_REASONS, RESUME_KINDS } from "../src/shared/resume-reasons.js";
import { createFleetEnv, type FleetEnv, readyInfo, waitFor } from "./support/fleet-env.js";
import { CRASH_HISTORY } from "./support/histories.js";
import { sampleValue } from "./support/metric-samples.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "done" }] }, tools: ["write_file"] };
const ask: Message = { role: "user", content: "please" };
const stopped = (stopReason: string): Message => ({ role: "assistant", content: "so far", stopReason });

describe("resume metric labels", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let apiUrl: string;

  beforeAll(async () => {
    fleet = await createFleetEnv("resumelabels");
    const started = await fleet.startApi();
    client = started.client;
    apiUrl = started.api.url;
  });
  afterAll(async () => {
    await fleet?.close();
  });

  const metricsAt = async (url: string) => (await fetch(`${url}/metrics`)).text();

  it("the API counts each refused resume once under its reason: the six of §2, and running", async () => {
    const refused: [string, Message[]][] = [
      ["completed", [ask, stopped("end_turn")]],
      ["refused", [ask, stopped("refusal")]],
      ["context_full", [ask, stopped("context_full")]],
      ["unknown_stop", [ask, stopped("weird_stop")]],
      ["empty", []],
      [
        "malformed",
        [ask, { role: "tool", toolCallId: "nobody", name: "write_file", content: "?", success: true }],
      ],
    ];
    expect(refused.map(([reason]) => reason).sort()).toEqual([...NOT_RESUMABLE_REASONS].sort());
    const before = await metricsAt(apiUrl);
    const count = (text: string, reason: string) =>
      sampleValue(text, "fleet_resume_refusals_total", { reason }) ?? Number.NaN;
    for (const [reason, messages] of refused) {
      const { id } = await client.createSession({ agent: AGENT, messages });
      const error = (await client.resume(id).catch((e: unknown) => e)) as FleetApiError;
      expect([error.status, error.reason]).toEqual([409, reason]);
      expect(await client.resumePoint(id)).toMatchObject({ resumable: false, reason });
    }
    // No worker runs yet: the message's run stays queued, and a resume is refused `running`.
    const { id: busy } = await client.createSession({ agent: AGENT });
    await client.send(busy, "hello");
    const error = (await client.resume(busy).catch((e: unknown) => e)) as FleetApiError;
    expect([error.status, error.reason]).toEqual([409, "running"]);
    expect(await client.resumePoint(busy)).toEqual({ resumable: false, reason: "running" });

    const after = await metricsAt(apiUrl);
    for (const reason of [...NOT_RESUMABLE_REASONS, "running"])
      expect([reason, count(after, reason) - count(before, reason)]).toEqual([reason, 1]);
  });

  it("a worker counts each resume under its kind and trigger api, and b under write_file interrupted", async () => {
    const resumable: [string, Message[]][] = [
      ["call_model", [ask]],
      ["recover_tools", CRASH_HISTORY],
      ["retry_response", [ask, stopped("interrupted")]],
      ["continue_response", [ask, stopped("max_output")]],
    ];
    expect(resumable.map(([kind]) => kind).sort()).toEqual([...RESUME_KINDS].sort());
    const ids: string[] = [];
    for (const [kind, messages] of resumable) {
      const { id } = await client.createSession({ agent: AGENT, messages });
      expect((await client.resume(id)).kind).toBe(kind);
      ids.push(id);
    }
    const worker = await fleet.spawnWorker();
    for (const id of ids)
      await waitFor(
        async () => (await client.getSession(id)).status === "completed",
        20_000,
        `${id} completed`,
      );

    const text = await metricsAt(`http://127.0.0.1:${readyInfo(worker).metricsPort}`);
    for (const kind of RESUME_KINDS) {
      expect([kind, sampleValue(text, "fleet_resumes_total", { kind, trigger: "api" })]).toEqual([kind, 1]);
      for (const trigger of ["sweeper", "worker"])
        expect([kind, trigger, sampleValue(text, "fleet_resumes_total", { kind, trigger })]).toEqual([
          kind,
          trigger,
          0,
        ]);
    }
    expect(sampleValue(text, "fleet_runs_total", { kind: "resume", outcome: "completed" })).toBe(4);
    // b was answered, not run: one interrupted call, no write_file that ran.
    const tool = (outcome: string) =>
      sampleValue(text, "fleet_tool_calls_total", { tool: "write_file", outcome });
    expect([tool("interrupted"), tool("ok"), tool("failed")]).toEqual([1, 0, 0]);
  });
});
