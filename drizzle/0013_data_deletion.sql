ALTER TABLE "batches" ADD COLUMN "deleted_at" timestamp with time zone;--> statement-breakpoint
CREATE INDEX "batches_deleted_idx" ON "batches" USING btree ("deleted_at") WHERE "batches"."deleted_at" is not null;--> statement-breakpoint
CREATE INDEX "batches_ended_idx" ON "batches" USING btree ("ended_at") WHERE "batches"."ended_at" is not null and "batches"."deleted_at" is null;--> statement-breakpoint
-- IF NOT EXISTS: on a large table, build it first by hand with CREATE INDEX CONCURRENTLY (same
-- definition), and this migration takes no lock while it builds.
CREATE INDEX IF NOT EXISTS "sessions_idle_idx" ON "sessions" USING btree ("updated_at","id") WHERE "sessions"."batch_id" is null and not ("sessions"."status" = 'active' and "sessions"."run_started" and "sessions"."tail_phase" = 'open');