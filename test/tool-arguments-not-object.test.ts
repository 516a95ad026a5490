/**
 * A tool call whose arguments are not one JSON object — what a model (a local one behind an
 * OpenAI-compatible server, often) sent broken, cut, or as an array or a string; kept in the
 * step under `_raw` (models/openai-tool-calls.ts) — runs no tool: it is answered `Invalid
 * arguments: …` with what the model sent, whether the tool has a zod `schema` or not. Before, a
 * tool without a schema (plain JavaScript; the README's `schema` is optional) ran with
 * `{ "_raw": "<text>" }` as its arguments — a `send_email` with `to` and `body` undefined — and a
 * tool with one answered `path: Required` (the model was told it left a field out, not that its
 * JSON was broken). Real API, worker (in this process), Postgres and Redis.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { defineTool } from "../src/worker/tools/registry.js";
import { type RunningWorker, startWorker } from "../src/worker/worker.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { runCalls } from "./support/scripted-calls.js";

let fleet: FleetEnv;
let client: FleetClient;
let worker: RunningWorker;
const ran: unknown[] = [];

/** No `schema`: plain JavaScript trusting its `parameters`. */
const sendNote = defineTool({
  name: "send_note",
  description: "Sends a note.",
  parameters: {
    type: "object",
    properties: { to: { type: "string" }, text: { type: "string" } },
    required: ["to", "text"],
  },
  async run(args: Record<string, unknown>) {
    ran.push(args);
    return `sent to ${String(args.to)}`;
  },
});

beforeAll(async () => {
  fleet = await createFleetEnv("tool-arguments-not-object");
  ({ client } = await fleet.startApi());
  worker = await startWorker(
    { ...fleet.config, logLevel: "silent" },
    { serveMetrics: false, tools: [sendNote] },
  );
}, 60_000);
afterAll(async () => {
  await worker?.stop();
  await fleet?.close();
});

const CUT = '{"to": "ops", "text": "disk ful';

describe("a tool call whose arguments are not one JSON object", () => {
  it("runs no tool, with or without a schema, and says what the model sent", async () => {
    const { endedReason, results } = await runCalls(client, [
      { id: "a", name: "send_note", arguments: { _raw: CUT } },
      { id: "b", name: "write_file", arguments: { _raw: '["notes.txt", "hi"]' } },
      { id: "c", name: "send_note", arguments: { to: "ops", text: "whole" } },
    ]);
    expect(endedReason).toBe("completed");
    const said = (sent: string) =>
      `Invalid arguments: they must be one JSON object (nested at most 100 levels); the model sent: ${sent}`;
    expect(results).toMatchObject([
      { toolCallId: "a", success: false, content: said(CUT) },
      { toolCallId: "b", success: false, content: said('["notes.txt", "hi"]') },
      { toolCallId: "c", success: true, content: "sent to ops" },
    ]);
    expect(ran).toEqual([{ to: "ops", text: "whole" }]);
  }, 60_000);
});
