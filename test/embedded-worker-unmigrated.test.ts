/**
 * A worker started from code (`startWorker`, the package's export for programs that embed
 * it) on a database the release's migrations have not all reached — the program upgraded
 * before `fleet migrate` ran — is refused at start, as `fleet worker` is, with the line that
 * says to migrate. Before, it started and every job it claimed failed on a column it had not
 * found (`column q.queue_seq does not exist` on a database migrated by the release before
 * 0021: 33 of 33 jobs failed, their runs left queued).
 */

import { randomUUID } from "node:crypto";
import { cp, mkdtemp, readFile, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { loadConfig } from "../src/shared/config.js";
import { MIGRATIONS_FOLDER } from "../src/shared/db/migrate.js";
import { startWorker } from "../src/worker/worker.js";
import { createDatabaseMigratedBy, useUpgradedDatabase } from "./support/older-migrations.js";

const REDIS_URL = process.env.TEST_REDIS_URL ?? "redis://127.0.0.1:6379";

describe("startWorker on a database not fully migrated", () => {
  const { admin, name, url, dirs } = useUpgradedDatabase("partmig");

  it("is refused naming DATABASE_URL and `fleet migrate`", async () => {
    // The release before this one: every migration but the newest.
    const older = await mkdtemp(join(tmpdir(), "fleet-older-migrations-"));
    dirs.push(older);
    await cp(MIGRATIONS_FOLDER, older, { recursive: true });
    const journalPath = join(older, "meta", "_journal.json");
    const journal = JSON.parse(await readFile(journalPath, "utf8")) as { entries: unknown[] };
    const shipped = journal.entries.length;
    journal.entries.pop();
    await writeFile(journalPath, JSON.stringify(journal));
    await createDatabaseMigratedBy(admin, name, url.toString(), older);
    const toolDir = await mkdtemp(join(tmpdir(), "fleet-partmig-tools-"));
    dirs.push(toolDir);
    const config = loadConfig({
      DATABASE_URL: url.toString(),
      REDIS_URL,
      FLEET_PREFIX: `t-partmig-${randomUUID().slice(0, 8)}`,
      FLEET_TOOL_DIR: toolDir,
      METRICS_PORT: "0",
      LOG_LEVEL: "silent",
    });
    const started = await startWorker(config, { serveMetrics: false }).then(
      (worker) => worker,
      (error: unknown) => error,
    );
    if (!(started instanceof Error)) await (started as { stop(): Promise<unknown> }).stop();
    expect(started).toBeInstanceOf(Error);
    expect((started as Error).message).toContain(
      `${shipped - 1} of ${shipped} migrations applied; run \`fleet migrate\``,
    );
    expect((started as Error).message).toMatch(/^DATABASE_URL: /);
  }, 60_000);
});
