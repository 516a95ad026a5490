-- Where a session's usage has been summed up to (store/session-usage.ts): GET /v1/sessions/:id
-- adds only the model steps after the mark instead of every step of the session, and moves the
-- mark on. A new, empty table: nothing on `sessions` is rewritten or locked for long.
CREATE TABLE "session_usage_marks" (
	"session_id" text PRIMARY KEY NOT NULL,
	"seq" integer NOT NULL,
	"input_tokens" bigint NOT NULL,
	"output_tokens" bigint NOT NULL,
	"cache_read_tokens" bigint NOT NULL,
	"cache_write_tokens" bigint NOT NULL,
	"reasoning_tokens" bigint NOT NULL,
	"cost_usd" numeric NOT NULL,
	"unknown_steps" bigint NOT NULL
);
--> statement-breakpoint
ALTER TABLE "session_usage_marks" ADD CONSTRAINT "session_usage_marks_session_id_sessions_id_fk" FOREIGN KEY ("session_id") REFERENCES "public"."sessions"("id") ON DELETE cascade ON UPDATE no action;