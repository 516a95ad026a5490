/**
 * A statement Postgres cuts off — `statement_timeout` or `lock_timeout` set by the DBA while an
 * operator's psql session holds a lock the API needs, or an operator's `pg_cancel_backend` —
 * is Postgres refusing work for now, not a bug of the fleet: the API answers `503
 * unavailable` with `Retry-After`, not `500 internal` (which says "see the API's log").
 */
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RunningApi } from "../src/producer/api-server.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

describe("Postgres cutting off a statement", () => {
  let fleet: FleetEnv;
  let api: RunningApi;
  let dbName: string;
  let admin: postgres.Sql;

  beforeAll(async () => {
    fleet = await createFleetEnv("pg-timeouts");
    ({ api } = await fleet.startApi());
    admin = postgres(fleet.env.DATABASE_URL!, { max: 2, onnotice: () => {} });
    dbName = new URL(fleet.env.DATABASE_URL!).pathname.slice(1);
  });
  afterAll(async () => {
    await admin?.end();
    await fleet?.close();
  });

  /** Sets `setting` on the database and makes the API's connections pick it up (reconnect). */
  async function withSetting(setting: string, value: string, body: () => Promise<void>) {
    const fresh = async () => {
      await admin.unsafe(
        `select pg_terminate_backend(pid) from pg_stat_activity where datname = '${dbName}' and pid <> pg_backend_pid()`,
      );
      // The first request after the termination may meet a terminated connection (503 too).
      await fetch(`${api.url}/v1/sessions`);
    };
    await admin.unsafe(`alter database "${dbName}" set ${setting} = '${value}'`);
    await fresh();
    try {
      await body();
    } finally {
      await admin.unsafe(`alter database "${dbName}" reset ${setting}`);
      await fresh();
    }
  }

  /** GET /v1/sessions while another session holds the sessions table locked. */
  async function listWhileLocked(): Promise<Response> {
    const locker = postgres(fleet.env.DATABASE_URL!, { max: 1, onnotice: () => {} });
    try {
      return await locker.begin(async (tx) => {
        await tx`lock table sessions in access exclusive mode`;
        return fetch(`${api.url}/v1/sessions`);
      });
    } finally {
      await locker.end();
    }
  }

  for (const [setting, code] of [
    ["statement_timeout", "57014"],
    ["lock_timeout", "55P03"],
  ] as const) {
    it(`answers 503 with Retry-After when ${setting} cuts a statement off (${code})`, async () => {
      await withSetting(setting, "200ms", async () => {
        const answer = await listWhileLocked();
        const text = await answer.text();
        expect(answer.status, text).toBe(503);
        expect(answer.headers.get("retry-after")).toBe("1");
        expect(JSON.parse(text).error.code).toBe("unavailable");
        expect(text).not.toMatch(/timeout|lock|57014|55P03|at /i);
      });
      // And once the lock is gone, the same request is answered.
      expect((await fetch(`${api.url}/v1/sessions`)).status).toBe(200);
    });
  }
});
