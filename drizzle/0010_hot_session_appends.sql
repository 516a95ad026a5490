DROP INDEX "sessions_batch_pending_idx";--> statement-breakpoint
DROP INDEX "sessions_attention_idx";--> statement-breakpoint
ALTER TABLE "sessions" ADD COLUMN "tail_phase" text GENERATED ALWAYS AS (case when tail_state in ('completed', 'empty') then tail_state else 'open' end) STORED NOT NULL;--> statement-breakpoint
CREATE INDEX "sessions_batch_pending_idx" ON "sessions" USING btree ("batch_id") WHERE "sessions"."batch_id" is not null and "sessions"."status" = 'active' and ("sessions"."tail_phase" <> 'completed' or not "sessions"."run_started");--> statement-breakpoint
CREATE INDEX "sessions_attention_idx" ON "sessions" USING btree ("next_resume_at") WHERE "sessions"."status" = 'active' and "sessions"."run_started" and "sessions"."tail_phase" = 'open';