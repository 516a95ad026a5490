/**
 * A `beforeRun` that throws a value nothing can read — a revoked proxy (a hook that threw the
 * request object its HTTP client had revoked), or an object whose `path` getter throws — ends
 * its run `failed` like any refusal (contracts §8), with what can be said of it. Before, the
 * text the tenant reads (tenantJobFailureText) read the value again outside any guard: its
 * throw escaped the hook runner, the job failed, the run was left `running` and its resumes
 * met the same hook until the session was parked, none of them ending `failed` as §8 says.
 * Real API, worker (in this process), Postgres and Redis.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { defineExtension } from "../src/worker/extensions.js";
import { type RunningWorker, startWorker } from "../src/worker/worker.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

let fleet: FleetEnv;
let client: FleetClient;
let worker: RunningWorker;
let modelCalls = 0;

const { proxy: revoked, revoke } = Proxy.revocable({}, {});
revoke();
const unreadable: Record<string, unknown> = {
  revoked,
  getter: {
    message: "the audit service is away",
    get path(): string {
      throw new Error("a getter that throws");
    },
  },
};

const gate = defineExtension({
  name: "gate",
  beforeRun(ctx) {
    throw unreadable[(ctx.metadata as { throws: string }).throws];
  },
});

const counter = defineExtension({
  name: "counter",
  onCommitted(_ctx, { message }) {
    if (message.role === "assistant") modelCalls++;
  },
});

beforeAll(async () => {
  fleet = await createFleetEnv("hook-unreadable-refusal");
  ({ client } = await fleet.startApi());
  worker = await startWorker(
    { ...fleet.config, logLevel: "silent" },
    { serveMetrics: false, extensions: [gate, counter] },
  );
}, 60_000);
afterAll(async () => {
  await worker?.stop();
  await fleet?.close();
});

describe("a beforeRun that throws a value nothing can read", () => {
  for (const [throws, said] of [
    ["revoked", "(a value that cannot be shown as text)"],
    ["getter", "the audit service is away"],
  ] as const) {
    it(`${throws}: the run ends failed with what can be said of it; nothing runs, nothing resumes`, async () => {
      const agent = { model: { provider: "scripted" as const, steps: [{ text: "never" }] } };
      const session = await client.createSession({ agent, metadata: { throws } });
      const { runId } = await client.send(session.id, "go");
      const run = await client.waitForRun(runId, { timeoutMs: 30_000 });
      expect({ endedReason: run.endedReason, error: run.error }).toEqual({
        endedReason: "failed",
        error: `beforeRun hook of extension "gate" failed: ${said}`,
      });
      const runs = await fleet.database.sql<{ kind: string }[]>`
        select kind from runs where session_id = ${session.id}`;
      expect(runs.map((r) => r.kind)).toEqual(["run"]);
      expect(modelCalls).toBe(0);
    }, 60_000);
  }
});
