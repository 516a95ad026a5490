/** `fleet keys create --tenant NAME | list | revoke KEY_ID`: the API keys of contracts §10. */
import { parseArgs } from "node:util";
import { loadConfig } from "../shared/config.js";
import { openDatabase } from "../shared/db/client.js";
import { NotFoundError, ValidationError } from "../shared/errors.js";
import { checkPostgres } from "../shared/preflight.js";
import { ApiKeys } from "../shared/store/api-keys.js";

const USAGE = [
  "usage:",
  "  fleet keys create --tenant NAME   create an API key for NAME; prints the key once (only its hash is stored)",
  "  fleet keys list                   every key: id, tenant, prefix, created, revoked",
  "  fleet keys revoke KEY_ID          revoke a key (the API stops accepting it within 5 s)",
].join("\n");

async function withKeys<T>(action: (keys: ApiKeys) => Promise<T>): Promise<T> {
  const config = loadConfig();
  await checkPostgres(config.databaseUrl);
  const database = openDatabase(config.databaseUrl, { max: 1 });
  try {
    return await action(new ApiKeys(database));
  } finally {
    await database.close();
  }
}

export async function keysCommand(args: string[]): Promise<number> {
  const [sub, ...rest] = args;
  if (sub === undefined || sub === "--help" || sub === "-h" || sub === "help") {
    (sub === undefined ? console.error : console.log)(USAGE);
    return sub === undefined ? 2 : 0;
  }
  switch (sub) {
    case "create": {
      const { values } = parseArgs({ args: rest, options: { tenant: { type: "string" } } });
      if (!values.tenant) throw new ValidationError("--tenant", `is required\n${USAGE}`);
      const tenant = values.tenant;
      const created = await withKeys((keys) => keys.create(tenant));
      console.log(created.key);
      console.error(
        `key ${created.id} created for tenant ${created.tenant} (printed above, only this once; clients send it as "Authorization: Bearer KEY")`,
      );
      return 0;
    }
    case "list": {
      parseArgs({ args: rest, options: {} });
      const list = await withKeys((keys) => keys.list());
      const rows = [
        ["ID", "TENANT", "PREFIX", "CREATED", "REVOKED"],
        ...list.map((k) => [
          k.id,
          k.tenant,
          k.prefix,
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
    case "revoke": {
      const { positionals } = parseArgs({ args: rest, options: {}, allowPositionals: true });
      const [id] = positionals;
      if (!id || positionals.length > 1) throw new ValidationError("", `revoke takes one KEY_ID\n${USAGE}`);
      if (!(await withKeys((keys) => keys.revoke(id)))) throw new NotFoundError(`API key ${id}`);
      console.log(`key ${id} revoked`);
      return 0;
    }
    default:
      throw new ValidationError("", `unknown keys command "${sub}"\n${USAGE}`);
  }
}
