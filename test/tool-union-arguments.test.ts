/**
 * A tool whose zod schema has a union (`z.union`, `.or`, `z.discriminatedUnion`) refuses the
 * model's arguments in the union's own words. Before, every union refusal was said as the
 * messages API's (field-errors.ts, whose unions are of message roles): the model read
 * `Invalid arguments: target.role: must be one of "user", "internal", "assistant", "tool"` for
 * a `target` that may be a string or a list, and a missing one or a wrong `kind` alike, so its
 * retry sent a `role`. Real API, worker (in this process), Postgres and Redis.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import type { FleetClient } from "../src/producer/client.js";
import type { Message } from "../src/shared/messages.js";
import { defineTool } from "../src/worker/tools/registry.js";
import { type RunningWorker, startWorker } from "../src/worker/worker.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

let fleet: FleetEnv;
let client: FleetClient;
let worker: RunningWorker;
let ran = 0;

const notify = defineTool({
  name: "notify",
  description: "Notifies one address or a list of them, by a channel.",
  parameters: { type: "object", properties: { target: {}, channel: { type: "object" } } },
  schema: z.object({
    target: z.union([z.string(), z.array(z.string())]),
    channel: z
      .discriminatedUnion("kind", [
        z.object({ kind: z.literal("email") }),
        z.object({ kind: z.literal("sms"), country: z.string() }),
      ])
      .optional(),
  }),
  async run() {
    ran++;
    return "sent";
  },
});

beforeAll(async () => {
  fleet = await createFleetEnv("tool-union-arguments");
  ({ client } = await fleet.startApi());
  worker = await startWorker(
    { ...fleet.config, logLevel: "silent" },
    { serveMetrics: false, tools: [notify] },
  );
}, 60_000);
afterAll(async () => {
  await worker?.stop();
  await fleet?.close();
});

/** The stored result of one call of `notify` with `args`. */
async function answerTo(args: Record<string, unknown>): Promise<Message | undefined> {
  const agent = {
    model: {
      provider: "scripted" as const,
      steps: [{ toolCalls: [{ name: "notify", arguments: args }] }, { text: "done" }],
    },
    tools: ["notify"],
  };
  const session = await client.createSession({ agent });
  const { runId } = await client.send(session.id, "notify them");
  const run = await client.waitForRun(runId, { timeoutMs: 30_000 });
  expect(run.endedReason).toBe("completed");
  const messages: Message[] = [];
  for await (const message of client.messages(session.id)) messages.push(message);
  return messages.find((m) => m.role === "tool");
}

describe("a tool whose schema has a union", () => {
  it("says what each form of the union wanted, never a message role", async () => {
    expect(await answerTo({ target: 7 })).toMatchObject({
      success: false,
      content:
        "Invalid arguments: target: matches none of its forms: expected string, received number; or expected array, received number",
    });
  }, 60_000);

  it("says a missing union field is required", async () => {
    expect(await answerTo({})).toMatchObject({
      success: false,
      content: "Invalid arguments: target: is required",
    });
  }, 60_000);

  it("names a discriminated union's values", async () => {
    expect(await answerTo({ target: "a@b.c", channel: { kind: "fax" } })).toMatchObject({
      success: false,
      content: 'Invalid arguments: channel.kind: must be one of "email", "sms"',
    });
    expect(ran).toBe(0);
    // And a good call runs.
    expect(await answerTo({ target: ["a@b.c"], channel: { kind: "sms", country: "NZ" } })).toMatchObject({
      success: true,
      content: "sent",
    });
    expect(ran).toBe(1);
  }, 60_000);
});
