/**
 * A worker killed (SIGKILL) after a model attempt that failed once its provider had reported
 * usage (an OpenAI chat usage chunk, then the stream cut before `[DONE]`), while its retry is
 * in flight: the attempt was billed, and no stored step holds it. Its tokens are in the
 * session's count (`tokens_used`, `agent.budget.maxTokens`) as soon as it failed, not only at
 * the run's end, which the killed worker never reached; and the crashed run's end and the
 * resume that follows do not count them again.
 *
 * A real `fleet worker` (killed, then another), an in-process sweeper and a fake
 * OpenAI-compatible server (test/support/fake-openai.ts).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { loadConfig } from "../src/shared/config.js";
import { type RunningSweeper, startSweeper } from "../src/sweeper/sweeper-process.js";
import { type FakeOpenAI, startFakeOpenAI } from "./support/fake-openai.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

describe("a worker killed after a billed failed attempt", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let sweeper: RunningSweeper;
  let fake: FakeOpenAI;

  beforeAll(async () => {
    fake = await startFakeOpenAI();
    fleet = await createFleetEnv("billedcrash", { env: { FLEET_ALLOWED_BASE_URLS: "http://127.0.0.1" } });
    ({ client } = await fleet.startApi());
    sweeper = await startSweeper({ ...loadConfig(fleet.env), logLevel: "silent" }, { serveMetrics: false });
  }, 90_000);
  afterAll(async () => {
    await sweeper?.stop();
    await fleet?.close();
    await fake?.close();
  });

  async function tokensUsed(id: string): Promise<number> {
    const [row] = await fleet.database.sql<{ tokens_used: string }[]>`
      select tokens_used::text from sessions where id = ${id}`;
    return Number(row!.tokens_used);
  }

  it("has counted its tokens once, before the kill and after the resume", async () => {
    fake.enqueue(
      // Billed: the usage chunk came, then the stream ended without [DONE].
      { text: [], usage: { prompt_tokens: 700, completion_tokens: 0 }, omitDone: true },
      // The retry: answered long after the worker is killed.
      { text: ["never"], delayMs: 120_000 },
      // The resume's request.
      { text: ["Whole answer."], usage: { prompt_tokens: 10, completion_tokens: 5 } },
    );
    const { id } = await client.createSession({
      agent: { model: { provider: "openai", model: "gpt-test", baseUrl: fake.url } },
    });
    const victim = await fleet.spawnWorker({ OPENAI_API_KEY: "test-key" });
    const { runId } = await client.send(id, "Question?");
    // The retry is sent only after the failed attempt was dealt with.
    await waitFor(() => fake.requests.length === 2, 20_000, "the retry is sent");
    victim.child.kill("SIGKILL");
    await victim.exited;

    expect(await tokensUsed(id)).toBe(700);
    expect((await client.getSession(id)).messages.map((m) => m.role)).toEqual(["user"]);

    const survivor = await fleet.spawnWorker({ OPENAI_API_KEY: "test-key" });
    await waitFor(
      async () => (await client.getSession(id)).status === "completed",
      40_000,
      "the session completed",
    );
    const done = await client.getSession(id);
    expect(done.runs.map((r) => [r.kind, r.endedReason])).toEqual([
      ["run", "crashed"],
      ["resume", "completed"],
    ]);
    expect(done.runs[0]!.id).toBe(runId);
    expect(done.messages.at(-1)).toMatchObject({
      role: "assistant",
      content: "Whole answer.",
      usage: { inputTokens: 10, outputTokens: 5 },
    });
    expect(fake.requests).toHaveLength(3);
    expect(await tokensUsed(id)).toBe(715);
    survivor.child.kill("SIGTERM");
    await survivor.exited;
  }, 90_000);
});
