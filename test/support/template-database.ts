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

export async function teardown(): Promise<void> {
  if (!template) return;
  const admin = postgres(ADMIN_URL, { max: 1, onnotice: () => {} });
  try {
    await admin.unsafe(`drop database if exists "${template}" with (force)`);
  } finally {
    await admin.end();
  }
}
