/**
 * `fleet batch submit` of a file whose sessions are large (contracts §9): each line fits one
 * request, but 1,000 (here 450) of them do not fit one body (16 MiB). The command sends parts bounded by
 * bytes and by imported messages (50,000 a request) as well as by count, so a file of long
 * inputs or long conversations is one batch, not a 413 or 400 (or, past the first part, a batch
 * cancelled with the sessions sent before).
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { runFleetCli } from "./support/fleet-cli.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

/** A session of about 40 KB: a document to summarise, say. */
const line = (i: number) =>
  JSON.stringify({
    customId: `doc-${i}`,
    agent: { model: { provider: "scripted", steps: [{ text: `summary ${i}` }] } },
    input: `summarise: ${"lorem ipsum ".repeat(3_400)}${i}`,
  });

/** A session that carries on an imported conversation of 100 messages. */
const continued = (i: number) =>
  JSON.stringify({
    customId: `chat-${i}`,
    agent: { model: { provider: "scripted", steps: [{ text: `reply ${i}` }] } },
    messages: Array.from({ length: 50 }, (_, k) => [
      { role: "user", content: `q${k}` },
      { role: "assistant", content: `a${k}`, stopReason: "end_turn" },
    ]).flat(),
    input: `and now ${i}?`,
  });

describe("fleet batch submit of large sessions", () => {
  let fleet: FleetEnv;
  let url: string;
  let client: FleetClient;
  let dir: string;

  beforeAll(async () => {
    fleet = await createFleetEnv("batch-cli-bytes");
    const started = await fleet.startApi();
    url = started.api.url;
    client = started.client;
    dir = await mkdtemp(join(tmpdir(), "fleet-batch-bytes-"));
  }, 60_000);
  afterAll(async () => {
    await fleet?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("a file of 450 sessions of 40 KB (18 MB) becomes one batch of 450, in parts under the body limit", async () => {
    const file = join(dir, "docs.jsonl");
    await writeFile(file, `${Array.from({ length: 450 }, (_, i) => line(i)).join("\n")}\n`);
    const submitted = await runFleetCli(
      ["batch", "submit", file],
      { ...fleet.env, FLEET_API_URL: url },
      120_000,
    );
    expect(submitted.stderr).not.toMatch(/larger than 16 MiB/);
    expect(submitted.code, submitted.stderr).toBe(0);
    const id = submitted.stdout.trim();
    const batch = await client.getBatch(id);
    expect(batch).toMatchObject({ open: false, counts: { total: 450 } });
    const stored = await fleet.database.sql<{ n: number; ids: number }[]>`
      select count(*)::int as n, count(distinct custom_id)::int as ids from sessions where batch_id = ${id}`;
    expect(stored[0]).toEqual({ n: 450, ids: 450 });
  }, 180_000);

  it("a file of 600 sessions importing 100 messages each (60,000) becomes one batch, in parts of at most 50,000 messages", async () => {
    const file = join(dir, "chats.jsonl");
    await writeFile(file, `${Array.from({ length: 600 }, (_, i) => continued(i)).join("\n")}\n`);
    const submitted = await runFleetCli(
      ["batch", "submit", file],
      { ...fleet.env, FLEET_API_URL: url },
      120_000,
    );
    expect(submitted.stderr).not.toMatch(/one request imports at most/);
    expect(submitted.code, submitted.stderr).toBe(0);
    const id = submitted.stdout.trim();
    expect(await client.getBatch(id)).toMatchObject({ open: false, counts: { total: 600 } });
    const stored = await fleet.database.sql<{ n: number }[]>`
      select count(*)::int as n from messages m join sessions s on s.id = m.session_id where s.batch_id = ${id}`;
    expect(stored[0]!.n).toBe(60_000);
  }, 180_000);
});
