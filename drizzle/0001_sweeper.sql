DROP INDEX "sessions_resumable_idx";--> statement-breakpoint
ALTER TABLE "runs" ADD COLUMN "last_sign_at" timestamp with time zone;--> statement-breakpoint
CREATE INDEX "sessions_attention_idx" ON "sessions" USING btree ("next_resume_at") WHERE "sessions"."status" = 'active' and "sessions"."tail_state" not in ('completed', 'empty');