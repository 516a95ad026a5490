/**
 * Extensions' hooks (contracts §8) are handed copies: a hook that writes to `ctx.history`, a
 * committed message or `ctx.agent` changes neither what the model is sent nor which agent
 * runs nor what is stored or transcribed. Before, the hooks got the worker's own objects: a
 * "redacting" hook rewrote the history the model was sent (Postgres kept the original) and a
 * beforeRun could lift the agent's limits. A real worker process, a fake OpenAI server.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { startFakeOpenAI } from "./support/fake-openai.js";
import { createFleetEnv, type FleetEnv, ROOT } from "./support/fleet-env.js";

const EXTENSION = join(ROOT, "test/fixtures/meddling-extension.ts");

describe("hooks get copies", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let hookLog: string;
  let transcripts: string;

  beforeAll(async () => {
    fleet = await createFleetEnv("hookviews", { env: { FLEET_ALLOWED_BASE_URLS: "http://127.0.0.1" } });
    ({ client } = await fleet.startApi());
    hookLog = join(fleet.config.toolDir, "hooks.jsonl");
    transcripts = join(fleet.config.toolDir, "transcripts");
    await fleet.spawnWorker(
      { OPENAI_API_KEY: "sk-test-hook-views", HOOK_LOG: hookLog, FLEET_TRANSCRIPT_DIR: transcripts },
      ["--extensions", EXTENSION],
    );
  }, 60_000);
  afterAll(async () => fleet?.close());

  it("a hook that writes to the history, a committed message or the agent changes nothing the worker uses", async () => {
    const fake = await startFakeOpenAI([{ text: ["one"] }, { text: ["two"] }]);
    try {
      const { id } = await client.createSession({
        agent: {
          model: { provider: "openai", model: "gpt-test", baseUrl: fake.url },
          tools: [],
          maxTurns: 3,
        },
      });
      for (const content of ["first", "second"]) {
        const { runId } = await client.send(id, content);
        expect((await client.waitForRun(runId, { timeoutMs: 20_000 })).endedReason).toBe("completed");
      }
      // The model was sent the stored history, with the agent's own system prompt (none).
      const sent = fake.requests.map((request) => request.body.messages);
      expect(sent).toEqual([
        [{ role: "user", content: "first" }],
        [
          { role: "user", content: "first" },
          { role: "assistant", content: "one" },
          { role: "user", content: "second" },
        ],
      ]);
      const stored = await client.getSession(id);
      expect(stored.messages.map((m) => m.content)).toEqual(["first", "one", "second", "two"]);
      const transcript = (await readFile(join(transcripts, `${id}.jsonl`), "utf8"))
        .trim()
        .split("\n")
        .map((line) => JSON.parse(line).message.content);
      expect(transcript).toEqual(["first", "one", "second", "two"]);
      // Every write was refused in the hook itself (a frozen copy), so its author finds out.
      const writes = (await readFile(hookLog, "utf8"))
        .trim()
        .split("\n")
        .map((line) => JSON.parse(line));
      expect(writes.length).toBeGreaterThanOrEqual(7);
      expect(writes.filter((w) => !w.refused)).toEqual([]);
    } finally {
      await fake.close();
    }
  }, 60_000);
});
