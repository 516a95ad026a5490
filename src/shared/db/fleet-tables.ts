/**
 * The tables of the API and the fleet around the sessions: API keys, batches, idempotency
 * keys, the fleet's identity and the tenants' webhook secret generations (part of the Drizzle
 * schema, schema.ts).
 */
import { sql } from "drizzle-orm";
import {
  boolean,
  index,
  integer,
  pgTable,
  primaryKey,
  text,
  timestamp,
  uniqueIndex,
} from "drizzle-orm/pg-core";

/** API keys (contracts §10): only the SHA-256 of a key is stored, never the key. */
export const apiKeys = pgTable(
  "api_keys",
  {
    id: text("id").primaryKey(),
    tenant: text("tenant").notNull(),
    /** sha256 hex of the whole key. */
    hash: text("hash").notNull(),
    /** What `fleet keys list` shows of the key, e.g. `fk_3f9a2c1b_Qx7m…`. */
    prefix: text("prefix").notNull(),
    /** Whether the key opens admin routes (Bull Board at /admin/queues), which show every tenant's jobs. */
    admin: boolean("admin").notNull().default(false),
    createdAt: timestamp("created_at", { withTimezone: true }).notNull().defaultNow(),
    revokedAt: timestamp("revoked_at", { withTimezone: true }),
  },
  (t) => [uniqueIndex("api_keys_hash_idx").on(t.hash)],
);

/**
 * Batches (contracts §9). Counts are never stored here: they are computed from the state of
 * the batch's sessions and runs, so they cannot drift across crashes and resumes.
 */
export const batches = pgTable(
  "batches",
  {
    id: text("id").primaryKey(),
    tenant: text("tenant").notNull(),
    /** Where the batch JSON is POSTed once it has ended (http/https, checked at submit). */
    webhookUrl: text("webhook_url"),
    /** An open batch takes more sessions (`POST /v1/batches/:id/sessions`) and does not end. */
    open: boolean("open").notNull().default(false),
    /** `sessionEvents` of every session created in it (also those appended to an open batch). */
    sessionEvents: boolean("session_events").notNull().default(true),
    createdAt: timestamp("created_at", { withTimezone: true }).notNull().defaultNow(),
    /** Set once every session was seen terminal (by the sweeper or a read). */
    endedAt: timestamp("ended_at", { withTimezone: true }),
    cancelledAt: timestamp("cancelled_at", { withTimezone: true }),
    webhookDeliveredAt: timestamp("webhook_delivered_at", { withTimezone: true }),
    /** Set when every delivery attempt failed (after at least 24 h). */
    webhookFailedAt: timestamp("webhook_failed_at", { withTimezone: true }),
    /**
     * Why the last delivery attempt failed, or why it was given up (webhook-errors.ts: one
     * line, at most 300 characters, no answer body); null until an attempt fails.
     */
    webhookLastError: text("webhook_last_error"),
    /**
     * The webhook's one retry budget, kept where a Redis that lost its data cannot take it: the
     * delivery attempts that failed (numbered across its jobs). Its day runs from `ended_at`.
     * A job queued anew (its job lost with Redis) goes on from here (batch-ends.ts).
     */
    webhookAttempts: integer("webhook_attempts").notNull().default(0),
    /**
     * Set by `DELETE /v1/batches/:id` (or retention): from then on the batch answers 404 and
     * owes no webhook; its sessions are deleted in chunks, then this row (data-deletion.ts).
     */
    deletedAt: timestamp("deleted_at", { withTimezone: true }),
  },
  (t) => [
    // Batches that have not ended, or whose webhook is still owed: the sweeper's scans.
    index("batches_unsettled_idx")
      .on(t.createdAt)
      .where(
        sql`${t.endedAt} is null or (${t.webhookUrl} is not null and ${t.webhookDeliveredAt} is null and ${t.webhookFailedAt} is null)`,
      ),
    index("batches_tenant_idx").on(t.tenant, t.createdAt),
    // Deletions left unfinished (the API stopped mid-way): the sweeper finishes them.
    index("batches_deleted_idx").on(t.deletedAt).where(sql`${t.deletedAt} is not null`),
    // Retention: ended batches, oldest end first.
    index("batches_ended_idx").on(t.endedAt).where(sql`${t.endedAt} is not null and ${t.deletedAt} is null`),
  ],
);

/**
 * `Idempotency-Key` (contracts §9): the row is inserted before the request acts, so a second
 * request with the same key waits for the first one's answer instead of acting again.
 */
export const idempotencyKeys = pgTable(
  "idempotency_keys",
  {
    tenant: text("tenant").notNull(),
    key: text("key").notNull(),
    /** sha256 of the method, the path and the body. */
    requestHash: text("request_hash").notNull(),
    /**
     * The method and path the key was first used with (`POST /v1/batches`), named in the 409
     * of a request with the same key to another one; never its body. Null for keys claimed
     * before migration 0020.
     */
    requestLine: text("request_line"),
    /** Null while the first request is still being answered. */
    statusCode: integer("status_code"),
    response: text("response"),
    createdAt: timestamp("created_at", { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [primaryKey({ columns: [t.tenant, t.key] }), index("idempotency_keys_created_idx").on(t.createdAt)],
);

/**
 * Which fleet (FLEET_PREFIX) this database belongs to: one row, written by the first
 * process that starts. A process of another prefix is refused at start, so two fleets never
 * take each other's workers for dead (fleet-identity.ts).
 */
export const fleetIdentity = pgTable("fleet_identity", {
  id: integer("id").primaryKey().default(1),
  prefix: text("prefix").notNull(),
  createdAt: timestamp("created_at", { withTimezone: true }).notNull().defaultNow(),
});

/**
 * Each tenant's webhook signing secret's generation (FLEET_WEBHOOK_SECRET_PER_TENANT,
 * webhook-secrets.ts): no row is generation 0, the secret derived as before rotations existed.
 * `POST /v1/webhook-secret/rotate` adds one; until `previous_valid_until` deliveries are also
 * signed with the generation before (tenant-webhook-secrets.ts).
 */
export const webhookSecretGenerations = pgTable("webhook_secret_generations", {
  tenant: text("tenant").primaryKey(),
  generation: integer("generation").notNull(),
  rotatedAt: timestamp("rotated_at", { withTimezone: true }).notNull().defaultNow(),
  previousValidUntil: timestamp("previous_valid_until", { withTimezone: true }).notNull(),
});
