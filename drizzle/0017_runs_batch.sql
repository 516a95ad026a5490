-- Whether a batch has ended (BatchStore.hasEnded, batch-busy.ts) reads the batch's own unfinished
-- runs and its sessions mid-run, from two partial indexes, instead of every unfinished run of its
-- tenant (10,000 queued in another batch: 22,000 index entries per look) and every session of it
-- that never started. Runs carry their session's batch, copied when they are inserted.
-- Only unfinished runs are filled in here: ended ones are never asked about.
ALTER TABLE "runs" ADD COLUMN "batch_id" text;--> statement-breakpoint
UPDATE "runs" SET "batch_id" = "sessions"."batch_id" FROM "sessions"
 WHERE "sessions"."id" = "runs"."session_id" AND "sessions"."batch_id" IS NOT NULL AND "runs"."status" <> 'ended';--> statement-breakpoint
-- Runs inserted without it (by a release before this one, during a rolling upgrade) get it at the
-- end of their statement, when the session a statement inserted with them is there too.
CREATE FUNCTION "runs_fill_batch_id"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE "runs" SET "batch_id" = "sessions"."batch_id" FROM "sessions"
   WHERE "runs"."id" = NEW."id" AND "sessions"."id" = NEW."session_id" AND "sessions"."batch_id" IS NOT NULL;
  RETURN NULL;
END $$;--> statement-breakpoint
CREATE TRIGGER "runs_fill_batch_id" AFTER INSERT ON "runs" FOR EACH ROW WHEN (NEW."batch_id" IS NULL)
  EXECUTE FUNCTION "runs_fill_batch_id"();--> statement-breakpoint
CREATE INDEX "runs_batch_state_idx" ON "runs" USING btree ("batch_id","status") WHERE "runs"."batch_id" is not null;--> statement-breakpoint
CREATE INDEX "sessions_batch_midrun_idx" ON "sessions" USING btree ("batch_id") WHERE "sessions"."batch_id" is not null and "sessions"."status" = 'active' and "sessions"."run_started" and "sessions"."tail_phase" <> 'completed';--> statement-breakpoint
DROP INDEX "sessions_batch_pending_idx";
