/**
 * A tool that returns bytes — a Buffer (`readFile(path)` without an encoding, the usual slip),
 * a Uint8Array, an ArrayBuffer — has them stored as the UTF-8 text they hold: bytes that are no
 * UTF-8 as U+FFFD, NUL as U+FFFD (contracts §12), and past MAX_TOOL_RESULT_CHARS only the text of
 * the first bytes, with a note saying how many the tool returned. Before, a Buffer went through
 * JSON.stringify: the model read `{"type":"Buffer","data":[108,105,…]}`, a file of 250 KB filled
 * the 1,000,000 characters kept, and a file of 100 MB took the worker's event loop ~30 s and
 * 1.5 GB of heap to make a 300,000,026-character string that was then cut (its lease and every
 * other run on it lost meanwhile). Real API, worker (in this process), Postgres and Redis.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import type { Message } from "../src/shared/messages.js";
import { MAX_TOOL_RESULT_CHARS } from "../src/worker/tools/execute-tool.js";
import { defineTool } from "../src/worker/tools/registry.js";
import { type RunningWorker, startWorker } from "../src/worker/worker.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

let fleet: FleetEnv;
let client: FleetClient;
let worker: RunningWorker;

const LINE = "line of a log file\n";
const blobs: Record<string, () => unknown> = {
  text: () => Buffer.from("notes: héllo ✓\n"),
  odd: () => new Uint8Array([0x6f, 0x6b, 0x00, 0xff, 0xfe, 0x21]),
  arrayBuffer: () => new TextEncoder().encode("from an ArrayBuffer").buffer,
  big: () => Buffer.from(LINE.repeat(Math.ceil((8 * 1024 * 1024) / LINE.length))),
};

const readBlob = defineTool({
  name: "read_blob",
  description: "Returns bytes.",
  parameters: { type: "object", properties: { kind: { type: "string" } }, required: ["kind"] },
  async run({ kind }: { kind: string }) {
    return blobs[kind]!() as string;
  },
});

beforeAll(async () => {
  fleet = await createFleetEnv("tool-bytes-result");
  ({ client } = await fleet.startApi());
  worker = await startWorker(
    { ...fleet.config, logLevel: "silent" },
    { serveMetrics: false, tools: [readBlob] },
  );
}, 60_000);
afterAll(async () => {
  await worker?.stop();
  await fleet?.close();
});

async function resultOf(kind: string): Promise<string> {
  const agent = {
    model: {
      provider: "scripted" as const,
      steps: [{ toolCalls: [{ name: "read_blob", arguments: { kind } }] }, { text: "read" }],
    },
    tools: ["read_blob"],
  };
  const session = await client.createSession({ agent });
  const { runId } = await client.send(session.id, "read it");
  const run = await client.waitForRun(runId, { timeoutMs: 60_000 });
  expect(run.endedReason).toBe("completed");
  const messages: Message[] = [];
  for await (const message of client.messages(session.id)) messages.push(message);
  const tool = messages.find((m) => m.role === "tool");
  expect(tool).toMatchObject({ role: "tool", success: true });
  return (tool as { content: string }).content;
}

describe("a tool that returns bytes", () => {
  it("has them stored as the UTF-8 text they hold", async () => {
    expect(await resultOf("text")).toBe("notes: héllo ✓\n");
    expect(await resultOf("arrayBuffer")).toBe("from an ArrayBuffer");
  }, 60_000);

  it("bytes that are no UTF-8 and NUL are stored as U+FFFD", async () => {
    expect(await resultOf("odd")).toBe("ok\uFFFD\uFFFD\uFFFD!");
  }, 60_000);

  it("past the bound, the text of the first bytes is kept with a note", async () => {
    const content = await resultOf("big");
    const bytes = LINE.length * Math.ceil((8 * 1024 * 1024) / LINE.length);
    expect(content.startsWith(LINE.repeat(100))).toBe(true);
    expect(content.slice(0, MAX_TOOL_RESULT_CHARS)).toBe(
      LINE.repeat(bytes / LINE.length).slice(0, MAX_TOOL_RESULT_CHARS),
    );
    expect(content.slice(MAX_TOOL_RESULT_CHARS)).toBe(
      `\n[truncated: the tool returned ${bytes.toLocaleString("en")} bytes; the text of the first ${MAX_TOOL_RESULT_CHARS.toLocaleString("en")} is kept]`,
    );
  }, 60_000);
});
