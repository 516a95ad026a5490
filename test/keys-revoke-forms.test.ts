/**
 * `fleet keys revoke` given the key rather than its id: an operator revoking a leaked key pastes
 * the key (or `fleet keys list`'s PREFIX, `fk_<id>_…`). The command looked the argument up as an
 * id only: `API key fk_1fcc577f6ff7_VWdN…(the whole secret) not found`, exit 2 — the key still
 * valid, and its secret written to the terminal, a CI log, a shell's scrollback. A whole key
 * now revokes the key it is (found by its hash, as the API finds it), the PREFIX form the key
 * of that id, an id with blanks around it that id; and a miss never repeats a secret.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { runFleetCli } from "./support/fleet-cli.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

describe("fleet keys revoke given the key, its prefix, or its id with blanks", () => {
  let fleet: FleetEnv;
  let keys: ApiKeys;
  beforeAll(async () => {
    fleet = await createFleetEnv("keys-revoke-forms");
    keys = new ApiKeys(fleet.database);
  }, 60_000);
  afterAll(() => fleet?.close());

  const revokedAt = async (id: string) => (await keys.list()).find((k) => k.id === id)?.revokedAt ?? null;

  it.each([
    ["the whole key", (k: { key: string; id: string }) => k.key],
    ["the list's PREFIX", (k: { key: string; id: string }) => `fk_${k.id}_…`],
    ["fk_ and the id", (k: { key: string; id: string }) => `fk_${k.id}`],
    ["the id with blanks around it", (k: { key: string; id: string }) => ` ${k.id}\n`],
  ])(
    "%s revokes that key, and the output holds nothing of its secret",
    async (_what, given) => {
      const created = await keys.create("acme");
      const run = await runFleetCli(["keys", "revoke", given(created)], fleet.env);
      expect([run.code, run.stdout, run.stderr]).toEqual([0, `key ${created.id} revoked\n`, ""]);
      expect(await revokedAt(created.id)).not.toBeNull();
    },
    60_000,
  );

  it("a bootstrap key given whole revokes it", async () => {
    const bootstrap = "operator-chosen-bootstrap-key-0123456789abcdef";
    // As the API stores it when no key exists: here, stored beside the others.
    await fleet.database.sql`
      insert into api_keys (id, tenant, hash, prefix, admin)
      values ('bootdeadbeef', 'default', encode(sha256(${bootstrap}::bytea), 'hex'), 'sha256:…', true)`;
    const run = await runFleetCli(["keys", "revoke", bootstrap], fleet.env);
    expect([run.code, run.stdout, run.stderr]).toEqual([0, "key bootdeadbeef revoked\n", ""]);
  }, 60_000);

  it("a key that is not stored is not found, named without its secret", async () => {
    const secret = "VWdNvAXpRvf7KRO07Wcr8q0umI6GHC-ji38L8JO0Qdo";
    const run = await runFleetCli(["keys", "revoke", `fk_0123456789ab_${secret}`], fleet.env);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain("fk_0123456789ab_…");
    expect(run.stderr).not.toContain(secret);
    const other = await runFleetCli(["keys", "revoke", `${secret}${secret}`], fleet.env);
    expect(other.code).toBe(2);
    expect(other.stderr).not.toContain(secret);
  }, 60_000);
});
