/**
 * Contracts §10: of an API key only its hash is stored. Its display prefix (`fleet keys list`)
 * keeps nothing of its secret, for new keys and, after migration 0016, for keys stored before.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ApiKeys, displayPrefix, hashKey } from "../src/shared/store/api-keys.js";
import { createFleetEnv, type FleetEnv, ROOT } from "./support/fleet-env.js";

describe("an API key's display prefix", () => {
  let fleet: FleetEnv;
  beforeAll(async () => {
    fleet = await createFleetEnv("keyprefix");
  }, 60_000);
  afterAll(() => fleet?.close());

  const storedRow = async (id: string) => {
    const [row] = await fleet.database.sql<{ prefix: string; hash: string }[]>`
      select prefix, hash from api_keys where id = ${id}`;
    return row!;
  };

  it("keeps the key's id part only; a key of another form shows the start of its hash", () => {
    expect(displayPrefix("fk_3f9a2c1b7d0e_Qx7mSecretSecretSecret")).toBe("fk_3f9a2c1b7d0e_…");
    const other = "an-operator-chosen-bootstrap-key-of-40-chars";
    expect(displayPrefix(other)).toBe(`sha256:${hashKey(other).slice(0, 8)}…`);
    expect(displayPrefix("fk_nounderscore")).toBe(`sha256:${hashKey("fk_nounderscore").slice(0, 8)}…`);
  });

  it("stores nothing of a new key's secret, created or bootstrapped", async () => {
    const keys = new ApiKeys(fleet.database);
    // The bootstrap key is stored only while no key exists: first.
    const bootKey = "an-operator-chosen-bootstrap-key-Qx7m-0123456789";
    expect(await keys.bootstrap(bootKey)).toBe(true);
    const [boot] = await fleet.database.sql<{ prefix: string }[]>`
      select prefix from api_keys where hash = ${hashKey(bootKey)}`;
    expect(boot!.prefix).toBe(`sha256:${hashKey(bootKey).slice(0, 8)}…`);
    const created = await keys.create("prefixes");
    const secret = created.key.slice(`fk_${created.id}_`.length);
    const row = await storedRow(created.id);
    expect(row.prefix).toBe(`fk_${created.id}_…`);
    expect(row.prefix).not.toContain(secret.slice(0, 4));
    expect((await keys.list()).find((k) => k.id === created.id)?.prefix).toBe(`fk_${created.id}_…`);
  });

  it("migration 0016 takes the secret's characters out of the prefixes stored before", async () => {
    const old = [
      { id: "oldfk0000001", hash: "a".repeat(64), prefix: "fk_oldfk0000001_Qx7m…" },
      { id: "bootdeadbeef", hash: `deadbeef${"b".repeat(56)}`, prefix: "op-sec…" },
      // A bootstrap key the operator wrote in the form of ours: its first part is secret too.
      { id: "bootcafebabe", hash: `cafebabe${"c".repeat(56)}`, prefix: "fk_opsecret_Qx7m…" },
    ];
    for (const k of old)
      await fleet.database.sql`
        insert into api_keys (id, tenant, hash, prefix, admin) values (${k.id}, 'prefixes', ${k.hash}, ${k.prefix}, false)`;
    const migration = await readFile(join(ROOT, "drizzle/0016_api_key_prefix.sql"), "utf8");
    // Twice: what it has rewritten it leaves as it is.
    for (let i = 0; i < 2; i++)
      for (const statement of migration.split("--> statement-breakpoint"))
        await fleet.database.sql.unsafe(statement);
    expect((await storedRow("oldfk0000001")).prefix).toBe("fk_oldfk0000001_…");
    expect((await storedRow("bootdeadbeef")).prefix).toBe("sha256:deadbeef…");
    expect((await storedRow("bootcafebabe")).prefix).toBe("sha256:cafebabe…");
  });
});
