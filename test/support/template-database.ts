/**
 * vitest globalSetup (vitest.config.ts, vitest.cluster.config.ts): one database migrated
 * once for the run, with migrateDatabase as a fleet runs it, handed to every test file as
 * TEST_TEMPLATE_DATABASE (the forked test processes inherit the variable). createFleetEnv
 * (test/support/fleet-env.ts) then creates each file's fresh database as a copy of it, which
 * Postgres does in a fraction of the time the 15 migrations take (about 2 s each on a busy
 * 2-core machine, for each of the 100-odd fleets of a run). The migrations themselves stay
 * tested where they are the point: `fleet migrate` (queue-and-cli, package), migrateDatabase
 * (fenced-writes).
 */
import { randomUUID } from "node:crypto";
import postgres from "postgres";
import { openDatabase } from "../../src/shared/db/client.js";
import { migrateDatabase } from "../../src/shared/db/migrate.js";

const ADMIN_URL = process.env.TEST_ADMIN_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";

let template: string | undefined;

export async function setup(): Promise<void> {
  const name = `fleet_t_template_${randomUUID().slice(0, 8)}`;
  const admin = postgres(ADMIN_URL, { max: 1, onnotice: () => {} });
  try {
    await admin.unsafe(`create database "${name}"`);
  } finally {
    await admin.end();
  }
  template = name;
  const url = new URL(ADMIN_URL);
  url.pathname = `/${name}`;
  const database = openDatabase(url.toString(), { max: 1 });
  try {
    await migrateDatabase(database);
  } finally {
    // Postgres copies a template only while nobody is connected to it.
    await database.close();
  }
  process.env.TEST_TEMPLATE_DATABASE = name;
}

/**
 * The name of a file's copy of `template` (63 bytes at most: the template's 25, `_`, and an
 * id of up to 29), which the teardown recognises as this run's.
 */
export function copyName(template: string, id: string): string {
  return `${template}_${id}`;
}

/**
 * Drops the copies left behind — a drop that had not ended (createFleetEnv's close() leaves it
 * running in the background, and a test process may end before it has), a spare copy made for
 * a next file there was not — then the template.
 */
export async function teardown(): Promise<void> {
  if (!template) return;
  const admin = postgres(ADMIN_URL, { max: 4, onnotice: () => {} });
  try {
    // A copy still being made or dropped for a test process that has ended: let it finish.
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline) {
      const [busy] = await admin<{ n: number }[]>`
        select count(*)::int as n from pg_stat_activity
         where pid <> pg_backend_pid() and state = 'active' and strpos(query, ${`"${copyName(template, "")}`}) > 0`;
      if (busy!.n === 0) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    const copies = await admin<{ name: string }[]>`
      select datname as name from pg_database where starts_with(datname, ${copyName(template, "")})`;
    await Promise.all(
      copies.map(({ name }) => admin.unsafe(`drop database if exists "${name}" with (force)`)),
    );
    await admin.unsafe(`drop database if exists "${template}" with (force)`);
  } finally {
    await admin.end();
  }
}
