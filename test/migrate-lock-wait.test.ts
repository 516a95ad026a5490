/**
 * `fleet migrate` behind a long reader. Migration 0021's ALTER TABLE "runs" needs an ACCESS
 * EXCLUSIVE lock; a transaction that has read `runs` and stays open (a report, a psql session
 * left open) holds it off. The migration waited with no lock_timeout, for as long as that
 * reader lived, and every later statement on `runs` (each worker's, each API request's)
 * queued behind its wait: an outage during an upgrade. Now each attempt waits at most
 * FLEET_MIGRATE_LOCK_TIMEOUT_MS, a few attempts with a pause between (the queued statements
 * run meanwhile), then it fails naming what holds the lock; nothing is half applied.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { readFile, rm } from "node:fs/promises";
import { join } from "node:path";
import postgres from "postgres";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { MIGRATIONS_FOLDER } from "../src/shared/db/migrate.js";
import { FLEET_BIN, ROOT, waitFor } from "./support/fleet-env.js";
import { createDatabaseMigratedBy, migrationsBefore } from "./support/older-migrations.js";

const ADMIN_URL = process.env.TEST_ADMIN_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
const REDIS_URL = process.env.TEST_REDIS_URL ?? "redis://127.0.0.1:6379";

type Migrating = { child: ChildProcess; stderr: () => string; exit: Promise<number | null> };
const children: ChildProcess[] = [];
afterEach(() => {
  for (const child of children.splice(0)) if (child.exitCode === null) child.kill("SIGKILL");
});

function fleetMigrate(databaseUrl: string): Migrating {
  const child = spawn(process.execPath, [FLEET_BIN, "migrate"], {
    cwd: ROOT,
    env: {
      ...process.env,
      DATABASE_URL: databaseUrl,
      REDIS_URL,
      FLEET_PREFIX: `t-ml-${randomUUID().slice(0, 8)}`,
      FLEET_MIGRATE_LOCK_TIMEOUT_MS: "500",
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.push(child);
  let err = "";
  child.stderr?.on("data", (d) => {
    err += d;
  });
  child.stdout?.resume();
  const exit = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  return { child, stderr: () => err, exit };
}

/** A transaction that has read `table` and stays open until `end()`. */
async function longReader(
  url: string,
  table: "runs" | "sessions" = "runs",
): Promise<{ pid: number; end: () => Promise<void> }> {
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  let release!: () => void;
  const released = new Promise<void>((resolve) => {
    release = resolve;
  });
  let pid = 0;
  let read!: () => void;
  const hasRead = new Promise<void>((resolve) => {
    read = resolve;
  });
  const done = sql.begin(async (tx) => {
    const [row] =
      table === "runs"
        ? await tx<{ pid: number }[]>`select pg_backend_pid() as pid, (select count(*) from runs) as n`
        : await tx<{ pid: number }[]>`select pg_backend_pid() as pid, (select count(*) from sessions) as n`;
    pid = row!.pid;
    read();
    await released;
  });
  await hasRead;
  return {
    pid,
    end: async () => {
      release();
      await done;
      await sql.end();
    },
  };
}

describe("fleet migrate while a long transaction has read the table a migration alters", () => {
  const admin = postgres(ADMIN_URL, { max: 1, onnotice: () => {} });
  const name = `fleet_t_miglock_${randomUUID().slice(0, 8)}`;
  const url = new URL(ADMIN_URL);
  url.pathname = `/${name}`;
  let older: string;

  beforeAll(async () => {
    // A database of the release before migration 0021.
    older = await migrationsBefore("0021_");
    await createDatabaseMigratedBy(admin, name, url.toString(), older);
  }, 60_000);
  afterAll(async () => {
    await admin.unsafe(`drop database if exists "${name}" with (force)`);
    await admin.end();
    if (older) await rm(older, { recursive: true, force: true });
  });

  async function applied(): Promise<{ migrations: number; queueSeq: boolean }> {
    const sql = postgres(url.toString(), { max: 1, onnotice: () => {} });
    try {
      const [m] = await sql<{ n: number }[]>`select count(*)::int as n from drizzle.__drizzle_migrations`;
      const columns = await sql`
        select 1 from information_schema.columns where table_name = 'runs' and column_name = 'queue_seq'`;
      return { migrations: m!.n, queueSeq: columns.length > 0 };
    } finally {
      await sql.end();
    }
  }

  it("does not hold other readers of the table behind it, and fails naming the holder, applying nothing", async () => {
    const reader = await longReader(url.toString());
    const other = postgres(url.toString(), { max: 1, onnotice: () => {} });
    try {
      const migrating = fleetMigrate(url.toString());
      await waitFor(() => /waiting for a lock/.test(migrating.stderr()), 60_000, "migrate to say it waits");
      // A statement on `runs` sent while the migration retries is answered, not queued for good.
      let answered = false;
      void other`select count(*) from runs`.then(() => {
        answered = true;
      });
      await waitFor(() => answered, 30_000, "a reader of runs to be answered");
      const code = await migrating.exit;
      const lines = migrating.stderr().trim().split("\n");
      expect(code, migrating.stderr()).toBe(1);
      const last = lines.at(-1)!;
      expect(last).toMatch(/^fleet migrate: migration 0021_run_queue_order could not take its locks/);
      expect(last).toContain(`pid ${reader.pid} (idle in transaction`);
      expect(last).toContain("select pg_backend_pid() as pid, (select count(*) from runs)");
      expect(last).toContain("no migration of this run was applied");
      expect(await applied()).toEqual({ migrations: 21, queueSeq: false });
    } finally {
      await other.end();
      await reader.end();
    }
  }, 120_000);

  it("applies the migration once the holder ends while it retries", async () => {
    const reader = await longReader(url.toString());
    const migrating = fleetMigrate(url.toString());
    try {
      await waitFor(() => /waiting for a lock/.test(migrating.stderr()), 60_000, "migrate to say it waits");
    } finally {
      await reader.end();
    }
    expect(await migrating.exit, migrating.stderr()).toBe(0);
    // Every shipped migration, 0021 and those after it included.
    const shipped = JSON.parse(await readFile(join(MIGRATIONS_FOLDER, "meta", "_journal.json"), "utf8")) as {
      entries: unknown[];
    };
    expect(await applied()).toEqual({ migrations: shipped.entries.length, queueSeq: true });
  }, 120_000);
});

describe("fleet migrate's drop of an invalid index while a long transaction has read its table", () => {
  const admin = postgres(ADMIN_URL, { max: 1, onnotice: () => {} });
  const name = `fleet_t_miglock_idx_${randomUUID().slice(0, 8)}`;
  const url = new URL(ADMIN_URL);
  url.pathname = `/${name}`;
  let older: string;
  afterAll(async () => {
    await admin.unsafe(`drop database if exists "${name}" with (force)`);
    await admin.end();
    if (older) await rm(older, { recursive: true, force: true });
  });

  it("waits no longer than a migration does, and names the holder", async () => {
    // A database before 0013 whose sessions_idle_idx a cancelled concurrent build left invalid
    // (test/migrate-invalid-index.test.ts): fleet migrate drops it with DROP INDEX, which locks
    // `sessions` as an ALTER TABLE does, before the migrations.
    older = await migrationsBefore("0013_");
    await createDatabaseMigratedBy(admin, name, url.toString(), older, async (sql) => {
      await sql`create index sessions_idle_idx on sessions (updated_at)`;
      await sql`update pg_index set indisvalid = false where indexrelid = 'sessions_idle_idx'::regclass`;
    });
    const reader = await longReader(url.toString(), "sessions");
    try {
      const migrating = fleetMigrate(url.toString());
      expect(await migrating.exit, migrating.stderr()).toBe(1);
      const last = migrating.stderr().trim().split("\n").at(-1)!;
      expect(last).toMatch(
        /^fleet migrate: `drop index "sessions_idle_idx"` \(before the migrations\) could not take its locks/,
      );
      expect(last).toContain(`pid ${reader.pid} (idle in transaction`);
    } finally {
      await reader.end();
    }
  }, 120_000);
});
