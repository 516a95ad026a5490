/**
 * `Idempotency-Key` (contracts §9), per tenant, for 24 h. The first request with a key
 * inserts its row before it acts; a second one with the same key finds the row and either
 * replays the stored answer, waits for it while the first is still being answered, or —
 * with another body — gets 409 `idempotency_key_reused`. Answers of 429 and 5xx (and a
 * resume's 409 `running`) are not kept (nothing was done; the row is removed so that a retry
 * acts: idempotency-hooks.ts `keepsAnswer`).
 */
import type { Database } from "../db/client.js";

/** How long a key is remembered. */
export const IDEMPOTENCY_TTL_HOURS = 24;
/** Keys one prune removes at most (one statement; the sweeper prunes again while a page is full). */
export const IDEMPOTENCY_PRUNE_PAGE = 10_000;
/**
 * A row still without an answer, not renewed for this long, belongs to a request that died:
 * taken over. A request still being answered renews it (`renew`) well within this.
 */
export const ABANDONED_AFTER_SECONDS = 120;

export type IdempotencyBegin =
  | { state: "new" }
  | { state: "replay"; statusCode: number; response: string }
  /** `requestLine`: the method and path the key was first used with (null: not stored, a key from before). */
  | { state: "reused"; requestLine: string | null }
  | { state: "pending" };

export class IdempotencyStore {
  constructor(private readonly database: Database) {}

  /**
   * Claims the key for this request, or says what the earlier request with it did.
   * `requestLine`: this request's method and path, told to a later request that reuses the key
   * for another one.
   */
  async begin(
    tenant: string,
    key: string,
    requestHash: string,
    requestLine: string | null = null,
  ): Promise<IdempotencyBegin> {
    const { sql } = this.database;
    const claimed = await sql`
      insert into idempotency_keys (tenant, key, request_hash, request_line)
      values (${tenant}, ${key}, ${requestHash}, ${requestLine})
      on conflict (tenant, key) do update
         set request_hash = excluded.request_hash, request_line = excluded.request_line,
             status_code = null, response = null, created_at = now()
       where idempotency_keys.created_at < now() - make_interval(hours => ${IDEMPOTENCY_TTL_HOURS})
          or (idempotency_keys.status_code is null
              and idempotency_keys.created_at < now() - make_interval(secs => ${ABANDONED_AFTER_SECONDS}))
      returning 1`;
    if (claimed.length > 0) return { state: "new" };
    const [row] = await sql<
      {
        request_hash: string;
        request_line: string | null;
        status_code: number | null;
        response: string | null;
      }[]
    >`
      select request_hash, request_line, status_code, response from idempotency_keys
       where tenant = ${tenant} and key = ${key}`;
    if (!row) return this.begin(tenant, key, requestHash, requestLine); // removed meanwhile: claim it
    if (row.request_hash !== requestHash) return { state: "reused", requestLine: row.request_line };
    if (row.status_code === null) return { state: "pending" };
    return { state: "replay", statusCode: row.status_code, response: row.response ?? "" };
  }

  /**
   * Waits (polling) for the answer of the request that holds the key; returns what `begin`
   * would, once it is not pending any more or `timeoutMs` passed.
   */
  async wait(
    tenant: string,
    key: string,
    requestHash: string,
    timeoutMs: number,
    requestLine: string | null = null,
  ): Promise<IdempotencyBegin> {
    const deadline = Date.now() + timeoutMs;
    for (let delay = 20; ; delay = Math.min(250, delay * 2)) {
      const state = await this.begin(tenant, key, requestHash, requestLine);
      if (state.state !== "pending" || Date.now() > deadline) return state;
      await new Promise((resolve) => setTimeout(resolve, delay));
    }
  }

  async complete(tenant: string, key: string, statusCode: number, response: string): Promise<void> {
    await this.database.sql`
      update idempotency_keys set status_code = ${statusCode}, response = ${response}
       where tenant = ${tenant} and key = ${key} and status_code is null`;
  }

  /**
   * Keeps the claim of a request still being answered: without it, a request answered for
   * longer than ABANDONED_AFTER_SECONDS had its key taken over by a retry, which acted again.
   */
  async renew(tenant: string, key: string, requestHash: string): Promise<void> {
    await this.database.sql`
      update idempotency_keys set created_at = now()
       where tenant = ${tenant} and key = ${key} and request_hash = ${requestHash} and status_code is null`;
  }

  /** Forgets a key whose request did nothing (429, 5xx), so that a retry acts. */
  async release(tenant: string, key: string): Promise<void> {
    await this.database.sql`
      delete from idempotency_keys where tenant = ${tenant} and key = ${key} and status_code is null`;
  }

  /** Removes keys older than the TTL (the sweeper calls it now and then). */
  async prune(limit = IDEMPOTENCY_PRUNE_PAGE): Promise<number> {
    const rows = await this.database.sql`
      delete from idempotency_keys where ctid in (
        select ctid from idempotency_keys
         where created_at < now() - make_interval(hours => ${IDEMPOTENCY_TTL_HOURS}) limit ${limit})
      returning 1`;
    return rows.length;
  }
}
