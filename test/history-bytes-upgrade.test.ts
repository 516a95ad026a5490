/**
 * A session stored before migration 0024 (`sessions.history_bytes`): the migration adds the
 * count with constant defaults, 0 bytes up to seq 0, and back-fills nothing (a back-fill would
 * rewrite every old session's row, under its lock, in the migrations' transaction). Such a row's
 * count bounds nothing: the bytes an unpaged read answers (SessionQueries.answerBytes, by which
 * a big answer waits for its place, big-bodies.ts) add the messages the count leaves out. Before,
 * they were the count, 0, and a big old session's whole read never waited. A database migrated by
 * the release before 0024, given a session there, then migrated to this release.
 */
import { randomUUID } from "node:crypto";
import { drizzle } from "drizzle-orm/postgres-js";
import { migrate } from "drizzle-orm/postgres-js/migrator";
import postgres from "postgres";
import { describe, expect, it } from "vitest";
import { openDatabase } from "../src/shared/db/client.js";
import { MIGRATIONS_FOLDER } from "../src/shared/db/migrate.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import {
  createDatabaseMigratedBy,
  migrationsBefore,
  useUpgradedDatabase,
} from "./support/older-migrations.js";

const AGENT = { model: { provider: "scripted", steps: [{ text: "hi" }] } };

describe("a session stored before migration 0024, read after it", () => {
  const { admin, name, url, dirs } = useUpgradedDatabase("bytes0024");

  it("answers its whole read's bytes, and its tail's, from its messages: the count is 0 up to seq 0", async () => {
    const older = await migrationsBefore("0024_");
    dirs.push(older);
    const id = randomUUID();
    // 3 messages, 2 MiB + 2 bytes: a big answer.
    await createDatabaseMigratedBy(admin, name, url.toString(), older, async (sql) => {
      await sql`insert into sessions (id, agent, last_seq) values (${id}, ${JSON.stringify(AGENT)}::jsonb, 3)`;
      await sql`insert into messages (session_id, seq, role, content)
                values (${id}, 1, 'user', ${"a".repeat(2 ** 20)}), (${id}, 2, 'user', ${"b".repeat(2 ** 20)}),
                       (${id}, 3, 'user', 'cc')`;
    });
    const sql = postgres(url.toString(), { max: 1, onnotice: () => {} });
    try {
      await migrate(drizzle(sql), { migrationsFolder: MIGRATIONS_FOLDER });
      expect(
        await sql`select history_bytes::int as bytes, history_bytes_seq as seq from sessions where id = ${id}`,
      ).toEqual([{ bytes: 0, seq: 0 }]);
    } finally {
      await sql.end();
    }
    const database = openDatabase(url.toString(), { max: 1 });
    try {
      const queries = new SessionQueries(database);
      const session = (await queries.getSession(id))!;
      const enough = 2 ** 20;
      expect(await queries.answerBytes(session, 0, enough)).toBe(2 * 2 ** 20 + 2);
      expect(await queries.answerBytes(session, 1, enough)).toBe(2 ** 20 + 2);
      // A poll of its tail is small: below `enough`, any bound of it will do.
      expect(await queries.answerBytes(session, 2, enough)).toBeLessThan(enough);
    } finally {
      await database.close();
    }
  }, 60_000);
});
