/** `fleet keys create --tenant NAME [--admin] | list | revoke KEY_ID|KEY`: the API keys of contracts §10. */
import { loadConfig } from "../shared/config.js";
import { openDatabase } from "../shared/db/client.js";
import { checkDatabase } from "../shared/preflight.js";
import { ApiKeys, displayPrefix, hashKey } from "../shared/store/api-keys.js";

async function withKeys<T>(action: (keys: ApiKeys) => Promise<T>): Promise<T> {
  const config = loadConfig();
  await checkDatabase(config.databaseUrl, config.preflightTimeoutMs);
  const database = openDatabase(config.databaseUrl, { max: 1 });
  try {
    return await action(new ApiKeys(database));
  } finally {
    await database.close();
  }
}

export type CreateKeyOptions = {
  /** The tenant the key acts for. */
  tenant: string;
  /** The key may open admin routes such as Bull Board. Default false. */
  admin?: boolean;
};

/** `fleet keys create`: prints the new key once on stdout (only its hash is stored). */
export async function createKeyCommand(options: CreateKeyOptions): Promise<number> {
  const { tenant, admin = false } = options;
  const created = await withKeys((keys) => keys.create(tenant, { admin }));
  console.log(created.key);
  // "Above" only on a terminal: `fleet keys create … > key.txt` put it in the file.
  const where = process.stdout.isTTY ? "printed above" : "written to stdout";
  console.error(
    `key ${created.id} created for tenant ${created.tenant}${admin ? ", with admin access (Bull Board)" : ""} (${where}, only this once; clients send it as "Authorization: Bearer KEY")`,
  );
  return 0;
}

/** `fleet keys list`: every key: id, tenant, prefix, admin, created, revoked. */
export async function listKeysCommand(): Promise<number> {
  const list = await withKeys((keys) => keys.list());
  const rows = [
    ["ID", "TENANT", "PREFIX", "ADMIN", "CREATED", "REVOKED"],
    ...list.map((k) => [
      k.id,
      k.tenant,
      k.prefix,
      k.admin ? "yes" : "no",
      k.createdAt.toISOString(),
      k.revokedAt?.toISOString() ?? "-",
    ]),
  ];
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  for (const row of rows)
    console.log(
      row
        .map((cell, i) => cell.padEnd(widths[i]!))
        .join("  ")
        .trimEnd(),
    );
  return 0;
}

/** Longer than this, a `fleet keys revoke` argument is no id (12 hex digits, `boot` and 8): it may be a secret. */
const LONGEST_ID = 24;

/**
 * `fleet keys revoke KEY_ID`: the API stops accepting the key within 5 s. Also given what an
 * operator holds of a leaked key: the key itself (found by its hash, as the API finds it, a
 * bootstrap key too), `fleet keys list`'s PREFIX (`fk_<id>_…`) or `fk_<id>`, and an id with
 * blanks around it. The argument was looked up as an id only: a whole key was "not found",
 * still valid, and its secret written in the error.
 */
export async function revokeKeyCommand(given: string): Promise<number> {
  const arg = given.trim();
  const prefixed = /^fk_([0-9a-f]{12})(?:_…?)?$/.exec(arg)?.[1];
  const revoked = await withKeys(async (keys) => {
    for (const id of [arg, prefixed]) if (id !== undefined && (await keys.revoke(id))) return id;
    return arg.length > LONGEST_ID ? keys.revokeByHash(hashKey(arg)) : undefined;
  });
  if (revoked === undefined) {
    // Named by the command, as `fleet batch status` names its own (it was `fleet: API key … not found`).
    const named = arg.length > LONGEST_ID ? displayPrefix(arg) : arg;
    console.error(`fleet keys revoke: API key ${named} not found (\`fleet keys list\` shows the keys' ids)`);
    return 2;
  }
  console.log(`key ${revoked} revoked`);
  return 0;
}
