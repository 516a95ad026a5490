/**
 * API keys (contracts §10). A key is `fk_<id>_<secret>` (the secret: 32 random bytes,
 * base64url); only its SHA-256 is stored, so a key is looked up by its hash — one index
 * probe whatever the key, and nothing compares secrets byte by byte.
 */
import { createHash, randomBytes } from "node:crypto";
import type { Database } from "../db/client.js";
import { ValidationError } from "../errors.js";

/** The tenant of sessions created without a key (dev mode) and of the bootstrap key. */
export const DEFAULT_TENANT = "default";

/**
 * The longest key the API reads (auth.ts): longer ones are refused without a look-up. Keys we
 * make are 60 characters; FLEET_BOOTSTRAP_KEY, the operator's, is refused past it.
 */
export const MAX_KEY_LENGTH = 256;

/** Tenant names: what `fleet keys create --tenant` accepts. */
const TENANT_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;

export type ApiKeyInfo = {
  id: string;
  tenant: string;
  prefix: string;
  /** Whether the key opens admin routes (Bull Board), which show every tenant's jobs. */
  admin: boolean;
  createdAt: Date;
  revokedAt: Date | null;
};

export function hashKey(key: string): string {
  return createHash("sha256").update(key, "utf8").digest("hex");
}

/** What `fleet keys list` shows of a key known only by its hash (a bootstrap key): the hash's start. */
function hashPrefix(hash: string): string {
  return `sha256:${hash.slice(0, 8)}…`;
}

/**
 * What `fleet keys list` shows of a key: enough to recognise it, nothing of its secret (only
 * its hash is stored, contracts §10): `fk_<id>_…`, or for a key of another form the start of
 * its hash.
 */
export function displayPrefix(key: string): string {
  const idEnd = key.startsWith("fk_") ? key.indexOf("_", 3) : -1;
  return idEnd > 3 ? `${key.slice(0, idEnd + 1)}…` : hashPrefix(hashKey(key));
}

export function checkTenantName(tenant: string): string {
  if (!TENANT_NAME.test(tenant)) {
    throw new ValidationError(
      "--tenant",
      "a tenant name is 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit",
    );
  }
  return tenant;
}

type RawKey = {
  id: string;
  tenant: string;
  prefix: string;
  admin: boolean;
  created_at: Date;
  revoked_at: Date | null;
};

const toInfo = (row: RawKey): ApiKeyInfo => ({
  id: row.id,
  tenant: row.tenant,
  prefix: row.prefix,
  admin: row.admin,
  createdAt: new Date(row.created_at),
  revokedAt: row.revoked_at ? new Date(row.revoked_at) : null,
});

export class ApiKeys {
  constructor(private readonly database: Database) {}

  /**
   * Creates a key for `tenant`; the key itself is returned once and never stored. `admin`:
   * the key also opens admin routes (Bull Board).
   */
  async create(tenant: string, options: { admin?: boolean } = {}): Promise<{ key: string } & ApiKeyInfo> {
    checkTenantName(tenant);
    const id = randomBytes(6).toString("hex");
    const key = `fk_${id}_${randomBytes(32).toString("base64url")}`;
    const [row] = await this.database.sql<RawKey[]>`
      insert into api_keys (id, tenant, hash, prefix, admin)
      values (${id}, ${tenant}, ${hashKey(key)}, ${displayPrefix(key)}, ${options.admin === true})
      returning id, tenant, prefix, admin, created_at, revoked_at`;
    return { key, ...toInfo(row!) };
  }

  /**
   * Stores `key` (chosen by the operator: FLEET_BOOTSTRAP_KEY) for the default tenant, as an
   * admin key (the deployment's first key is the operator's), when no key exists at all. True when it was stored; safe when several APIs start at once.
   */
  async bootstrap(key: string): Promise<boolean> {
    // Sent as `Authorization: Bearer KEY`, a key is one token of visible ASCII of at most
    // MAX_KEY_LENGTH: one with a space or another byte, or a longer one, would be stored and then
    // refused (401) on every request, for ever. Once a key exists it is not stored, so a
    // deployment that kept such a value (or a short one) still starts, and is told at start that
    // the key is refused (auth.ts storeBootstrapKey).
    const short = key.length < 32;
    const long = key.length > MAX_KEY_LENGTH;
    if ((short || long || !/^[\x21-\x7e]+$/.test(key)) && !(await this.anyExists())) {
      throw new ValidationError(
        "FLEET_BOOTSTRAP_KEY",
        short
          ? "must be at least 32 characters long"
          : long
            ? `must be at most ${MAX_KEY_LENGTH} characters long: the API reads no longer key`
            : "must be visible ASCII characters only (no spaces, tabs or other bytes): clients send it as `Authorization: Bearer KEY`",
      );
    }
    if (short || long) return false;
    const hash = hashKey(key);
    // Shown by its hash whatever its form: an operator's key that looks like `fk_<id>_…` has no
    // id of ours, and its first part is secret too.
    const rows = await this.database.sql`
      insert into api_keys (id, tenant, hash, prefix, admin)
      select ${`boot${hash.slice(0, 8)}`}, ${DEFAULT_TENANT}, ${hash}, ${hashPrefix(hash)}, true
       where not exists (select 1 from api_keys)
      on conflict do nothing
      returning 1`;
    return rows.length > 0;
  }

  async list(): Promise<ApiKeyInfo[]> {
    const rows = await this.database.sql<RawKey[]>`
      select id, tenant, prefix, admin, created_at, revoked_at from api_keys order by created_at, id`;
    return rows.map(toInfo);
  }

  /** Revokes a key; false when there is no key with this id. Revoking twice keeps the first time. */
  async revoke(id: string): Promise<boolean> {
    const rows = await this.database.sql`
      update api_keys set revoked_at = coalesce(revoked_at, now()) where id = ${id} returning 1`;
    return rows.length > 0;
  }

  /**
   * Revokes the key whose hash is `hash` (`hashKey` of the key itself); its id, or undefined
   * when no key has it. Revoking twice keeps the first time.
   */
  async revokeByHash(hash: string): Promise<string | undefined> {
    const [row] = await this.database.sql<{ id: string }[]>`
      update api_keys set revoked_at = coalesce(revoked_at, now()) where hash = ${hash} returning id`;
    return row?.id;
  }

  /** Whether any key was ever created (revoked ones count: revoking never reopens the API). */
  async anyExists(): Promise<boolean> {
    const [row] = await this.database.sql<{ any: boolean }[]>`select exists (select 1 from api_keys) as any`;
    return row?.any ?? false;
  }

  /** The key id, tenant and admin flag of a valid (stored, not revoked) key, by its hash (`hashKey`). */
  async tenantOf(hash: string): Promise<{ id: string; tenant: string; admin: boolean } | undefined> {
    const [row] = await this.database.sql<{ id: string; tenant: string; admin: boolean }[]>`
      select id, tenant, admin from api_keys where hash = ${hash} and revoked_at is null`;
    return row;
  }
}
