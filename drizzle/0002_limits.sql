DROP INDEX "sessions_attention_idx";--> statement-breakpoint
ALTER TABLE "sessions" ADD COLUMN "run_started" boolean DEFAULT false NOT NULL;--> statement-breakpoint
ALTER TABLE "sessions" ADD COLUMN "attempt_point" text;--> statement-breakpoint
ALTER TABLE "sessions" ADD COLUMN "attempt_seq" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "sessions" ADD COLUMN "model_calls" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "sessions" ADD COLUMN "tokens_used" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
CREATE INDEX "sessions_attention_idx" ON "sessions" USING btree ("next_resume_at") WHERE "sessions"."status" = 'active' and "sessions"."run_started" and "sessions"."tail_state" not in ('completed', 'empty');