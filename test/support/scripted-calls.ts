/**
 * One scripted step of tool calls, as the tests of how a call is answered take it
 * (tool-arguments-not-object, tool-async-schema, tool-error-keys, tool-abort-listeners): a new
 * session whose model calls `calls` together and then answers "done", sent one message; waits
 * for that run's end and reads the session's tool results back through the API.
 */
import type { FleetClient } from "../../src/producer/client.js";
import type { Message } from "../../src/shared/messages.js";

export type ScriptedCall = { id: string; name: string; arguments: Record<string, unknown> };

export async function runCalls(
  client: FleetClient,
  calls: ScriptedCall[],
  options: {
    /** The agent's tools: by default the names `calls` use. */
    tools?: string[];
    timeoutMs?: number;
    /** Said after the error when the run does not end in time (a worker's output, say). */
    onTimeout?: () => string;
  } = {},
): Promise<{ endedReason: string | null; results: Message[] }> {
  const tools = options.tools ?? [...new Set(calls.map((call) => call.name))];
  const session = await client.createSession({
    agent: { model: { provider: "scripted", steps: [{ toolCalls: calls }, { text: "done" }] }, tools },
  });
  const { runId } = await client.send(session.id, "go");
  const run = await client
    .waitForRun(runId, { timeoutMs: options.timeoutMs ?? 30_000 })
    .catch((error: Error) => {
      throw new Error(options.onTimeout ? `${error.message}; ${options.onTimeout()}` : error.message);
    });
  const messages: Message[] = [];
  for await (const message of client.messages(session.id)) messages.push(message);
  return { endedReason: run.endedReason, results: messages.filter((m) => m.role === "tool") };
}

/**
 * A new session whose model calls the tool `name` once (call id `callId`, no arguments) and then
 * answers "done", sent one message: the session's and its run's ids (the crash and stop tests'
 * start: worker-blocked-loop, worker-tool-exit, role-repeated-sigterm).
 */
export async function sendOneCall(
  client: FleetClient,
  name: string,
  callId: string,
): Promise<{ id: string; runId: string }> {
  const { id } = await client.createSession({
    agent: {
      model: {
        provider: "scripted",
        steps: [{ toolCalls: [{ id: callId, name, arguments: {} }] }, { text: "done" }],
      },
      tools: [name],
    },
  });
  const { runId } = await client.send(id, "go");
  return { id, runId };
}
