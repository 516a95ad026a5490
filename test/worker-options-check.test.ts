/**
 * Tools and extensions given in code (`startWorker(config, { tools, extensions })`, the
 * package's API for programs that embed a worker) are checked at start, as `fleet worker`
 * checks its `--tools` and `--extensions` modules (plugin-checks.ts, one check for both). Before,
 * none of this was: a worker started with a hook named `onMesage` (never called), with two
 * tools of one name (the second replaced the first), a tool whose `parameters` is no object
 * (every run of an agent listing it would fail), a hook that is no function (it threw at its
 * first run), and took jobs. Now each is refused with a ValidationError naming the option, the
 * tool or extension and what is wrong, before anything is opened: the queued run stays queued,
 * and a worker started right afterwards runs it. Real Postgres, Redis and API.
 */
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import type { FleetClient } from "../src/producer/client.js";
import { ValidationError } from "../src/shared/errors.js";
import { defineExtension, type Extension } from "../src/worker/extensions.js";
import { workerOptionsProblem } from "../src/worker/plugin-checks.js";
import { defineTool, type Tool } from "../src/worker/tools/registry.js";
import { startWorker, type WorkerOptions } from "../src/worker/worker.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

let fleet: FleetEnv;
let client: FleetClient;
let runId: string;

const echo = defineTool({
  name: "echo",
  description: "Says its text.",
  parameters: { type: "object", properties: { text: { type: "string" } } },
  async run(args) {
    return String((args as { text?: unknown }).text);
  },
});

const HOOKS = "beforeRun, onMessage, afterRun, onError, onCommitted, onSessionDeleted";

/** Bad options, each with the message startWorker must refuse them with. */
const BAD: { name: string; options: WorkerOptions; message: string; transcripts?: boolean }[] = [
  {
    name: "a misspelt hook",
    options: { extensions: [{ name: "audit", onMesage() {} } as unknown as Extension] },
    message: `options.extensions: extension "audit": onMesage is no hook (the hooks: ${HOOKS})`,
  },
  {
    name: "a hook's name in another case",
    options: { extensions: [{ name: "audit", afterrun() {} } as unknown as Extension] },
    message: 'options.extensions: extension "audit": afterrun is no hook; afterRun?',
  },
  {
    name: "a hook that is no function",
    options: { extensions: [{ name: "audit", afterRun: "log" } as unknown as Extension] },
    message: 'options.extensions: extension "audit": afterRun is not a function',
  },
  {
    name: "an extension without a name",
    options: { extensions: [defineExtension({ name: "ok" }), { afterRun() {} } as unknown as Extension] },
    message: "options.extensions: extension 1 has no name",
  },
  {
    // One module given twice (`--extensions audit.ts --extensions audit.ts`), or two modules
    // naming theirs alike: every hook ran twice, and the logs and the hook-failure alert could
    // not tell which one failed.
    name: "two extensions of one name",
    options: {
      extensions: [
        defineExtension({ name: "audit", afterRun() {} }),
        defineExtension({ name: "metrics" }),
        defineExtension({ name: "audit", beforeRun() {} }),
      ],
    },
    message: 'options.extensions: extension "audit": two extensions have this name',
  },
  {
    name: "an extension named as the built-in transcript (FLEET_TRANSCRIPT_DIR set)",
    options: { extensions: [defineExtension({ name: "transcript", afterRun() {} })] },
    transcripts: true,
    message:
      'options.extensions: extension "transcript": the built-in transcript extension has this name (FLEET_TRANSCRIPT_DIR is set)',
  },
  {
    name: "two tools of one name",
    options: { tools: [echo, { ...echo, description: "Another." } as Tool] },
    message: 'options.tools: tool "echo": two tools have this name',
  },
  {
    name: "a tool named as a built-in",
    options: { tools: [{ ...echo, name: "write_file" } as Tool] },
    message:
      'options.tools: tool "write_file": a built-in tool has this name (write_file, append_file, sleep, fail)',
  },
  {
    name: "parameters that are no object",
    options: { tools: [{ ...echo, parameters: "text" } as unknown as Tool] },
    message: 'options.tools: tool "echo": parameters is not an object (a JSON Schema)',
  },
  {
    name: "parameters of another type than object",
    options: { tools: [{ ...echo, parameters: { type: "string" } } as Tool] },
    message:
      'options.tools: tool "echo": parameters must be a JSON Schema of type "object", not "string" (model providers refuse any other)',
  },
  {
    // `parameters: z.object(...)` (the zod schema belongs in `schema`): its JSON has `type:
    // "object"` and no `properties`, so the worker started, every model was sent a tool that
    // takes no arguments, and every call came with `{}`.
    name: "a zod schema as parameters",
    options: { tools: [{ ...echo, parameters: z.object({ text: z.string() }) } as unknown as Tool] },
    message:
      'options.tools: tool "echo": parameters is a zod schema, not a JSON Schema: the model would be sent no properties (give z.toJSONSchema(schema) as parameters, and the zod schema as schema)',
  },
  {
    // Both providers refuse such a schema (400 "… is not of type 'object'"): every run failed.
    name: "properties that are no object",
    options: { tools: [{ ...echo, parameters: { type: "object", properties: ["text"] } } as Tool] },
    message:
      'options.tools: tool "echo": parameters.properties must be an object of JSON Schemas, one per argument (model providers refuse any other)',
  },
  {
    name: "required that is no list of names",
    options: { tools: [{ ...echo, parameters: { type: "object", required: "text" } } as Tool] },
    message:
      'options.tools: tool "echo": parameters.required must be an array of argument names (model providers refuse any other)',
  },
  {
    name: "a run that is no function",
    options: { tools: [{ ...echo, run: "echo" } as unknown as Tool] },
    message: 'options.tools: tool "echo": run is not a function',
  },
];

beforeAll(async () => {
  fleet = await createFleetEnv("worker-options-check");
  ({ client } = await fleet.startApi());
  const agent = { model: { provider: "scripted" as const, steps: [{ text: "done" }] } };
  const session = await client.createSession({ agent });
  ({ runId } = await client.send(session.id, "go"));
}, 60_000);
afterAll(async () => {
  await fleet?.close();
});

describe("startWorker given bad tools or extensions", () => {
  for (const bad of BAD)
    it(`refuses ${bad.name} at start, naming it`, async () => {
      const started = await startWorker(
        {
          ...fleet.config,
          logLevel: "silent",
          ...(bad.transcripts ? { transcriptDir: join(fleet.config.toolDir, "transcripts") } : {}),
        },
        {
          serveMetrics: false,
          ...bad.options,
        },
      ).then(
        async (worker) => {
          await worker.stop();
          return "started";
        },
        (error: unknown) => error,
      );
      // Before: "started" (and the queued run taken by it).
      expect(started).toBeInstanceOf(ValidationError);
      expect((started as Error).message).toBe(bad.message);
      const run = await client.getRun(runId);
      expect(run.status).toBe("queued");
      expect(run.workerId).toBeNull();
    }, 60_000);

  it("a good worker started afterwards runs the run that waited", async () => {
    const extension = defineExtension({ name: "audit", afterRun() {}, version: 2 } as Extension);
    expect(workerOptionsProblem({ tools: [echo], extensions: [extension] })).toBeNull();
    const worker = await startWorker(
      { ...fleet.config, logLevel: "silent" },
      { serveMetrics: false, tools: [echo], extensions: [extension] },
    );
    try {
      const run = await client.waitForRun(runId, { timeoutMs: 30_000 });
      expect(run.endedReason).toBe("completed");
    } finally {
      await worker.stop();
    }
  }, 60_000);
});
