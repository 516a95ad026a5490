/**
 * Tools an agent may use (contracts.md §12), through the real API and a real worker: the
 * API refuses an agent listing a tool no worker registered (built-ins are always known),
 * a worker started with `--tools` makes its tools acceptable, and a model calling a tool
 * its agent does not list gets a failed result while nothing runs.
 */
import { readdir } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetApiError, type FleetClient } from "../src/producer/client.js";
import { FleetToolNames, readToolNames, toolNamesKey } from "../src/shared/tool-names.js";
import { createFleetEnv, type FleetEnv, ROOT, readyInfo, type WorkerProcess } from "./support/fleet-env.js";

const scripted = (steps: unknown[] = [{ text: "ok" }]) => ({ provider: "scripted" as const, steps }) as never;

describe("FleetToolNames", () => {
  it("knows the built-ins without reading, reads once for a new name, then remembers it", async () => {
    const reads: number[] = [];
    let registered = ["write_file"];
    const names = new FleetToolNames(async () => {
      reads.push(1);
      return registered;
    });
    expect([...(await names.known(["write_file", "append_file", "sleep", "fail"]))]).toHaveLength(4);
    expect(reads).toHaveLength(0);
    expect((await names.known(["shout"])).has("shout")).toBe(false);
    expect(reads).toHaveLength(1);
    registered = ["write_file", "shout"];
    expect((await names.known(["shout", "nope"])).has("shout")).toBe(true);
    expect(reads).toHaveLength(2);
    expect((await names.known(["shout"])).has("shout")).toBe(true);
    expect(reads).toHaveLength(2);
  });
});

describe("tools an agent may use, end to end", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  const workers: WorkerProcess[] = [];

  /** The sum over this fleet's workers of fleet_tool_calls_total lines containing every part. */
  async function toolCalls(...parts: string[]): Promise<{ total: number; text: string }> {
    let total = 0;
    let text = "";
    for (const worker of workers) {
      const body = await fetch(`http://127.0.0.1:${readyInfo(worker).metricsPort}/metrics`).then((r) =>
        r.text(),
      );
      text += body;
      for (const line of body.split("\n")) {
        if (line.startsWith("fleet_tool_calls_total{") && parts.every((p) => line.includes(p)))
          total += Number(line.split(" ").at(-1));
      }
    }
    return { total, text };
  }

  async function countSessions(): Promise<number> {
    const [row] = await fleet.database.sql<{ n: number }[]>`select count(*)::int as n from sessions`;
    return row!.n;
  }

  async function refusal(request: Promise<unknown>): Promise<FleetApiError> {
    const error = await request.catch((e: unknown) => e);
    expect(error).toBeInstanceOf(FleetApiError);
    return error as FleetApiError;
  }

  beforeAll(async () => {
    fleet = await createFleetEnv("tooltrust");
    ({ client } = await fleet.startApi());
  });
  afterAll(async () => fleet?.close());

  it("accepts built-in tools before any worker has started", async () => {
    expect(await fleet.redis.exists(toolNamesKey(fleet.env.FLEET_PREFIX!))).toBe(0);
    const { id } = await client.createSession({
      agent: { model: scripted(), tools: ["write_file", "append_file", "sleep", "fail"] },
    });
    expect(id).toBeTruthy();
  });

  it("refuses an unknown tool with 400 naming agent.tools[i], on create and in a batch, storing nothing", async () => {
    const before = await countSessions();
    const single = await refusal(client.createSession({ agent: { model: scripted(), tools: ["shout"] } }));
    expect(single.status).toBe(400);
    expect(single.field).toBe("agent.tools[0]");
    expect(single.message).toContain('"shout"');

    const second = await refusal(
      client.createSession({ agent: { model: scripted(), tools: ["sleep", "shout"] } }),
    );
    expect(second.field).toBe("agent.tools[1]");

    const batch = await refusal(
      client.createBatch([
        { agent: { model: scripted(), tools: ["write_file"] }, input: "go" },
        { agent: { model: scripted(), tools: ["shout"] }, input: "go" },
      ]),
    );
    expect(batch.status).toBe(400);
    expect(batch.field).toBe("sessions[1].agent.tools[0]");
    expect(await countSessions()).toBe(before);
  });

  it("refuses a tool listed twice with 400 naming the repeat (providers refuse duplicate tool names), storing nothing", async () => {
    const before = await countSessions();
    const single = await refusal(
      client.createSession({ agent: { model: scripted(), tools: ["sleep", "write_file", "sleep"] } }),
    );
    expect(single.status).toBe(400);
    expect(single.field).toBe("agent.tools[2]");
    expect(single.message).toContain('"sleep"');
    const batch = await refusal(
      client.createBatch([
        { agent: { model: scripted(), tools: ["write_file"] }, input: "go" },
        { agent: { model: scripted(), tools: ["write_file", "write_file"] }, input: "go" },
      ]),
    );
    expect(batch.status).toBe(400);
    expect(batch.field).toBe("sessions[1].agent.tools[1]");
    expect(await countSessions()).toBe(before);
  });

  it("accepts a user tool once a worker started with --tools has registered it", async () => {
    workers.push(await fleet.spawnWorker({}, ["--tools", join(ROOT, "test/fixtures/extra-tools.ts")]));
    expect((await readToolNames(fleet.redis, fleet.env.FLEET_PREFIX!)).sort()).toEqual([
      "append_file",
      "fail",
      "shout",
      "sleep",
      "write_file",
    ]);
    const steps = [{ toolCalls: [{ id: "s1", name: "shout", arguments: { text: "hi" } }] }, { text: "done" }];
    const { id } = await client.createSession({ agent: { model: scripted(steps), tools: ["shout"] } });
    const { runId } = await client.send(id, "shout");
    expect((await client.waitForRun(runId, { timeoutMs: 20_000 })).endedReason).toBe("completed");
    expect((await client.getSession(id)).messages[2]).toMatchObject({ content: "HI (s1)", success: true });

    const { sessions } = await client.createBatch([{ agent: { model: scripted(), tools: ["shout"] } }]);
    expect(sessions).toHaveLength(1);
  });

  it("answers a call to a tool the agent does not list with a failed result and writes nothing", async () => {
    workers.push(await fleet.spawnWorker());
    const invented = 'made_up"} 1\nfleet_evil{x="y';
    const steps = [
      {
        toolCalls: [
          { id: "w1", name: "write_file", arguments: { path: "escaped.txt", content: "should not exist" } },
          { id: "m1", name: invented, arguments: {} },
        ],
      },
      { text: "done" },
    ];
    const { id } = await client.createSession({ agent: { model: scripted(steps), tools: [] } });
    const { runId } = await client.send(id, "try it");
    expect((await client.waitForRun(runId, { timeoutMs: 20_000 })).endedReason).toBe("completed");
    const session = await client.getSession(id);
    expect(session.messages.slice(2, 4)).toEqual([
      expect.objectContaining({
        role: "tool",
        toolCallId: "w1",
        content: 'no tool named "write_file" is available to this agent',
        success: false,
      }),
      expect.objectContaining({
        role: "tool",
        toolCallId: "m1",
        content: `no tool named "${invented}" is available to this agent`,
        success: false,
      }),
    ]);
    expect(await readdir(fleet.config.toolDir)).not.toContain("escaped.txt");

    // Either worker may have run the session: the registered name is its own label, the
    // made-up one counts as `unregistered`, and the model's text is never a label.
    expect((await toolCalls('tool="write_file"', 'outcome="failed"')).total).toBe(1);
    const unregistered = await toolCalls('tool="unregistered"', 'outcome="failed"');
    expect(unregistered.total).toBe(1);
    expect(unregistered.text).not.toContain("made_up");
    expect(unregistered.text).not.toContain("fleet_evil");
  });
});
