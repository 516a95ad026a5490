/**
 * The resume point of a long session among many short ones (GET …/resume-point, an explicit
 * resume, the sweeper's automatic one: history-reads.ts `readShapeTail`) reads its tail, not
 * every message, whatever Postgres's statistics say. Until the table is analyzed again after a
 * session grew (an import, a day of runs), Postgres estimates its messages at a few dozen, and
 * "the last assistant message" was planned as a bitmap scan of the whole session and a sort:
 * 20,601 message rows and index entries read for one resume point of a 20,300-message session.
 * Counted in rows and index entries read (Postgres's statistics), not in time.
 */
import { expect, it } from "vitest";
import { parseAgentConfig } from "../src/shared/agent-config.js";
import type { Message } from "../src/shared/messages.js";
import { queriesEnvForFile } from "./support/queries-env.js";
import { readsWhile } from "./support/stat-reads.js";

const env = queriesEnvForFile("resume-point-reads");
const AGENT = parseAgentConfig({ model: { provider: "scripted", steps: [{ text: "hi" }] } });

/** `n` messages: question, answer, …, then `users` questions more. */
function conversation(n: number, users = 0): Message[] {
  const out: Message[] = [];
  for (let i = 0; out.length < n; i++)
    out.push(
      { role: "user", content: `q${i}` },
      { role: "assistant", content: `a${i}`, stopReason: "end_turn" },
    );
  for (let i = 0; i < users; i++) out.push({ role: "user", content: `more ${i}` });
  return out;
}

/** Rows and index entries of `messages` read while `fn` runs. */
const messageReads = (fn: () => Promise<unknown>) =>
  readsWhile(
    env.db,
    async () => {
      const [row] = await env.db.sql<{ n: string }[]>`
        select (select coalesce(sum(idx_tup_read), 0) from pg_stat_user_indexes where relname = 'messages')
             + (select coalesce(seq_tup_read, 0) from pg_stat_user_tables where relname = 'messages') as n`;
      return { n: Number(row!.n) };
    },
    fn,
  );

it("reads the tail of a long session, not its every message", async () => {
  const { id } = await env.queries.createSession({ agent: AGENT, messages: conversation(10_000) });
  await env.queries.appendImported("default", id, 10_000, conversation(10_000, 300), 32 << 20);
  for (let i = 0; i < 200; i++) await env.queries.createSession({ agent: AGENT, messages: conversation(4) });

  let point: unknown;
  const reads = await messageReads(async () => {
    point = await env.queries.resumePoint(id);
  });
  expect(point).toMatchObject({ resumable: true, kind: "call_model" });
  // Before: every message of the session (20,601 rows and index entries).
  expect(reads.n).toBeLessThan(2_000);

  // A session with no model step at all still has its point.
  const { id: users } = await env.queries.createSession({ agent: AGENT, messages: conversation(0, 3) });
  expect(await env.queries.resumePoint(users)).toMatchObject({ resumable: true, kind: "call_model" });
}, 120_000);
