/**
 * A stop reason that is not a string — a number or an object where the API has a string (JSON
 * allows it; the SDKs check nothing) — is an unknown stop reason like any other (resume-semantics
 * §6: stored verbatim, as its JSON text, and classified `unknown_stop`). Before, the step went
 * on with the number as its stop reason and the run crashed on it ("reason.slice is not a
 * function"): the answer lost, the run `crashed` with no error, and the session resumed, to
 * crash again, at every attempt. A real `fleet worker` and the fake servers.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import type { ModelConfig } from "../src/shared/agent-config.js";
import { useFakeProviders } from "./support/fake-providers.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const fakes = useFakeProviders();
let fleet: FleetEnv;
let client: FleetClient;

beforeAll(async () => {
  fleet = await createFleetEnv("oddstopreasons", { env: { FLEET_ALLOWED_BASE_URLS: "http://127.0.0.1" } });
  client = (await fleet.startApi()).client;
  await fleet.spawnWorker();
}, 90_000);

afterAll(async () => {
  await fleet?.close();
});

/** A value a server sends where the API has a string. */
const notAString = (value: unknown) => value as string;

/** Runs one message on `model`; the run, the stored step and the resume point. */
async function oneRun(model: ModelConfig) {
  const { id } = await client.createSession({ agent: { model } });
  const run = await client.waitForRun((await client.send(id, "hi")).runId, { timeoutMs: 30_000 });
  const session = await client.getSession(id);
  return { run, step: session.messages.at(-1), point: await client.resumePoint(id) };
}

it("chat completions: finish_reason 5 is the unknown stop reason '5'", async () => {
  fakes.chat.enqueue({ text: ["hi"], finishReason: notAString(5) });
  const { run, step, point } = await oneRun({ provider: "openai", model: "m", baseUrl: fakes.chat.url });
  expect(run).toMatchObject({ endedReason: "unknown_stop" });
  expect(step).toMatchObject({ role: "assistant", content: "hi", stopReason: "5" });
  expect(point).toEqual({ resumable: false, reason: "unknown_stop", detail: "5" });
  expect(fakes.chat.requests).toHaveLength(1);
});

it("Anthropic: a stop_reason object is the unknown stop reason of its JSON", async () => {
  fakes.anthropic.script({ blocks: [{ type: "text", text: "hi" }], stopReason: notAString({ why: 1 }) });
  const { run, step, point } = await oneRun({
    provider: "anthropic",
    model: "m",
    baseUrl: fakes.anthropic.url,
  });
  expect(run).toMatchObject({ endedReason: "unknown_stop" });
  expect(step).toMatchObject({ role: "assistant", content: "hi", stopReason: '{"why":1}' });
  expect(point).toEqual({ resumable: false, reason: "unknown_stop", detail: '{"why":1}' });
  expect(fakes.anthropic.requests).toHaveLength(1);
});
