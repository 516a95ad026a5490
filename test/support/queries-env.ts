/**
 * A fleet environment for a file's tests of the store's reads: its database, one more pool of
 * one connection on it (`db`), and SessionQueries on that pool, made in `beforeAll` and closed
 * in `afterAll`.
 */
import { afterAll, beforeAll } from "vitest";
import { openDatabase } from "../../src/shared/db/client.js";
import { SessionQueries } from "../../src/shared/store/session-queries.js";
import { createFleetEnv, type FleetEnv } from "./fleet-env.js";

export type QueriesEnv = {
  readonly fleet: FleetEnv;
  readonly db: ReturnType<typeof openDatabase>;
  readonly queries: SessionQueries;
};

export function queriesEnvForFile(name: string): QueriesEnv {
  const held = {} as { fleet: FleetEnv; db: ReturnType<typeof openDatabase>; queries: SessionQueries };
  beforeAll(async () => {
    held.fleet = await createFleetEnv(name);
    held.db = openDatabase(held.fleet.config.databaseUrl, { max: 1 });
    held.queries = new SessionQueries(held.db);
  }, 60_000);
  afterAll(async () => {
    await held.db?.close();
    await held.fleet?.close();
  });
  return held;
}
