/**
 * `agent.budget` (contracts §12) across `fleet session export` / `fleet session import`: the
 * budget bounds a whole session, so a session that spent it does not get it back by going out
 * and in again. The file carries what the session spent (its end line's `spent`), and the
 * imported session counts at least that and at least what the file's own steps show (a model
 * call each, their reported tokens); the file is user input, so a `spent` that is not a count
 * is refused and a low one cannot lower what the steps show.
 */
import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetApiError, FleetClient } from "../src/producer/client.js";
import type { Message } from "../src/shared/messages.js";
import { runFleetCli } from "./support/fleet-cli.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

const AGENT = {
  model: { provider: "scripted" as const, steps: [{ toolCalls: [{ name: "sleep", arguments: { ms: 1 } }] }] },
  tools: ["sleep"],
  maxTurns: 20,
  budget: { maxModelCalls: 2 },
};
let fleet: FleetEnv;
let client: FleetClient;
let url: string;

beforeAll(async () => {
  fleet = await createFleetEnv("transfer-budget");
  const started = await fleet.startApi();
  client = started.client;
  url = started.api.url;
  await fleet.spawnWorker();
}, 60_000);
afterAll(async () => fleet?.close());

const cli = (args: string[]) => runFleetCli(args, { ...fleet.env, FLEET_API_URL: url }, 120_000);

async function parked(id: string) {
  let last = await client.getSession(id);
  await waitFor(
    async () => {
      last = await client.getSession(id);
      return last.status === "parked" || last.status === "completed";
    },
    30_000,
    `session ${id} to stop`,
  );
  return last;
}

async function counters(id: string): Promise<{ calls: number; tokens: number }> {
  const [row] = await fleet.database.sql<{ model_calls: number; tokens_used: string }[]>`
    select model_calls, tokens_used::text from sessions where id = ${id}`;
  return { calls: row!.model_calls, tokens: Number(row!.tokens_used) };
}

async function exported(id: string, name: string): Promise<string> {
  const file = join(fleet.config.toolDir, name);
  const out = await cli(["session", "export", id, "--out", file]);
  expect(out.code, out.stderr).toBe(0);
  return file;
}

async function imported(file: string): Promise<string> {
  const done = await cli(["session", "import", file]);
  expect(done.code, done.stderr).toBe(0);
  return done.stdout.trim();
}

/** A user message, then `steps` assistant steps of `tokens` tokens each with their results. */
function stepsOf(steps: number, tokens: number): Message[] {
  const messages: Message[] = [{ role: "user", content: "go" }];
  for (let i = 0; i < steps; i++)
    messages.push(
      {
        role: "assistant",
        content: "",
        toolCalls: [{ id: `c${i}`, name: "sleep", arguments: { ms: 1 } }],
        stopReason: "tool_use",
        usage: { inputTokens: tokens, outputTokens: 0 },
      },
      { role: "tool", toolCallId: `c${i}`, name: "sleep", content: "slept", success: true },
    );
  return messages;
}

/** An export file of `stepsOf(steps, tokens)`, its end line saying `spent`. */
function craftedFile(steps: number, tokens: number, spent: unknown): string {
  const messages = stepsOf(steps, tokens);
  const lines: unknown[] = [
    { fleetSessionExport: 1, id: "x", agent: AGENT, metadata: {}, exportedAt: "2026-01-01T00:00:00.000Z" },
    ...messages.map((m, i) => ({ ...m, seq: i + 1 })),
    { fleetSessionExportEnd: { messages: messages.length, ...(spent === undefined ? {} : { spent }) } },
  ];
  return `${lines.map((l) => JSON.stringify(l)).join("\n")}\n`;
}

describe("agent.budget across export and import", () => {
  it("a session that spent its maxModelCalls is parked again at once after export and import", async () => {
    const { id } = await client.createSession({ agent: AGENT });
    await client.send(id, "sleep forever");
    const original = await parked(id);
    expect(original.parkedReason).toMatch(/^budget_exhausted: agent.budget.maxModelCalls/);
    const steps = original.messages.filter((m) => m.role === "assistant").length;
    expect(steps).toBe(2);

    const file = await exported(id, "spent.jsonl");
    const copy = await imported(file);
    await client.send(copy, "sleep again");
    const again = await parked(copy);
    // No model call was made for it: its only steps are the two the file brought.
    expect(again.messages.filter((m) => m.role === "assistant").length).toBe(steps);
    expect(again.parkedReason).toMatch(/^budget_exhausted: agent.budget.maxModelCalls/);
    const spent = await counters(id);
    expect(spent.calls).toBe(2);
    expect(await counters(copy)).toEqual(spent);
    const end = JSON.parse((await readFile(file, "utf8")).trimEnd().split("\n").at(-1)!);
    expect(end).toEqual({
      fleetSessionExportEnd: {
        messages: original.messages.length,
        spent: { modelCalls: 2, tokens: spent.tokens },
      },
    });
  }, 90_000);

  it("keeps what the session spent beyond its steps (failed attempts, unknown usage)", async () => {
    const { id } = await client.createSession({
      agent: { ...AGENT, budget: { maxModelCalls: 50, maxTokens: 10_000 } },
      messages: stepsOf(2, 30),
    });
    expect(await counters(id)).toEqual({ calls: 2, tokens: 60 });
    // As a worker leaves it after failed attempts billed 940 tokens and 3 calls that stored no step.
    await fleet.database.sql`update sessions set model_calls = 5, tokens_used = 1000 where id = ${id}`;
    const copy = await imported(await exported(id, "beyond.jsonl"));
    expect(await counters(copy)).toEqual({ calls: 5, tokens: 1000 });
  }, 60_000);

  it("a file's spent cannot count less than its own steps show", async () => {
    const file = join(fleet.config.toolDir, "low.jsonl");
    await writeFile(file, craftedFile(3, 100, { modelCalls: 0, tokens: 0 }));
    expect(await counters(await imported(file))).toEqual({ calls: 3, tokens: 300 });
    // An older export, without `spent`: its steps still count.
    await writeFile(file, craftedFile(3, 100, undefined));
    expect(await counters(await imported(file))).toEqual({ calls: 3, tokens: 300 });
    await writeFile(file, craftedFile(3, 100, { modelCalls: 9, tokens: 2_000 }));
    expect(await counters(await imported(file))).toEqual({ calls: 9, tokens: 2_000 });
  }, 90_000);

  it("refuses a spent that is not a count, creating nothing", async () => {
    const file = join(fleet.config.toolDir, "bad.jsonl");
    const [before] = await fleet.database.sql<{ n: number }[]>`select count(*)::int as n from sessions`;
    for (const spent of [
      { modelCalls: -1, tokens: 0 },
      { modelCalls: 1.5, tokens: 0 },
      { modelCalls: 3_000_000_000, tokens: 0 },
      { modelCalls: 1, tokens: 1e300 },
      { modelCalls: "9", tokens: 0 },
      [],
    ]) {
      await writeFile(file, craftedFile(1, 1, spent));
      const out = await cli(["session", "import", file]);
      expect(out.code, JSON.stringify(spent)).toBe(2);
      expect(out.stderr).toMatch(/line 5: .*spent/);
    }
    const [after] = await fleet.database.sql<{ n: number }[]>`select count(*)::int as n from sessions`;
    expect(after!.n).toBe(before!.n);
  }, 120_000);

  it("the API takes what was spent beyond the history, bounded, and counts the history's steps", async () => {
    const messages = [
      { role: "user" as const, content: "go" },
      {
        role: "assistant" as const,
        content: "hi",
        stopReason: "end_turn",
        usage: { inputTokens: 4, outputTokens: 1 },
      },
    ];
    const { id } = await client.createSession({
      agent: AGENT,
      messages,
      spentOutsideHistory: { modelCalls: 3, tokens: 10 },
    });
    expect(await counters(id)).toEqual({ calls: 4, tokens: 15 });
    expect((await client.getSession(id)).spent).toEqual({ modelCalls: 4, tokens: 15 });
    for (const [field, spent] of [
      ["spentOutsideHistory.modelCalls", { modelCalls: -1 }],
      ["spentOutsideHistory.modelCalls", { modelCalls: 2_147_483_648 }],
      ["spentOutsideHistory.tokens", { tokens: 0.5 }],
      ["spentOutsideHistory.tokens", { tokens: Number.MAX_SAFE_INTEGER }],
    ] as const) {
      const error = (await client
        .createSession({ agent: AGENT, messages, spentOutsideHistory: spent })
        .catch((e) => e)) as FleetApiError;
      expect(error.status, field).toBe(400);
      expect(error.field).toBe(field);
    }
  });
});
