CREATE TABLE "messages" (
	"session_id" text NOT NULL,
	"seq" integer NOT NULL,
	"role" text NOT NULL,
	"content" text NOT NULL,
	"tool_calls" jsonb,
	"tool_call_id" text,
	"call_seq" integer,
	"name" text,
	"success" boolean,
	"stop_reason" text,
	"usage" jsonb,
	"run_id" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "messages_session_id_seq_pk" PRIMARY KEY("session_id","seq")
);
--> statement-breakpoint
CREATE TABLE "runs" (
	"id" text PRIMARY KEY NOT NULL,
	"session_id" text NOT NULL,
	"kind" text NOT NULL,
	"resume_kind" text,
	"trigger" text NOT NULL,
	"status" text DEFAULT 'queued' NOT NULL,
	"ended_reason" text,
	"error" text,
	"input" text,
	"model" jsonb,
	"worker_id" text,
	"job_id" text,
	"usage" jsonb,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"started_at" timestamp with time zone,
	"ended_at" timestamp with time zone
);
--> statement-breakpoint
CREATE TABLE "sessions" (
	"id" text PRIMARY KEY NOT NULL,
	"agent" jsonb NOT NULL,
	"metadata" jsonb DEFAULT '{}'::jsonb NOT NULL,
	"status" text DEFAULT 'active' NOT NULL,
	"tail_state" text DEFAULT 'empty' NOT NULL,
	"last_seq" integer DEFAULT 0 NOT NULL,
	"lease_epoch" bigint DEFAULT 0 NOT NULL,
	"lease_owner" text,
	"resume_attempts" integer DEFAULT 0 NOT NULL,
	"next_resume_at" timestamp with time zone,
	"parked_reason" text,
	"last_active_at" timestamp with time zone DEFAULT now() NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "messages" ADD CONSTRAINT "messages_session_id_sessions_id_fk" FOREIGN KEY ("session_id") REFERENCES "public"."sessions"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "runs" ADD CONSTRAINT "runs_session_id_sessions_id_fk" FOREIGN KEY ("session_id") REFERENCES "public"."sessions"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "messages_one_result_per_call" ON "messages" USING btree ("session_id","call_seq","tool_call_id") WHERE "messages"."role" = 'tool';--> statement-breakpoint
CREATE INDEX "runs_session_idx" ON "runs" USING btree ("session_id","created_at");--> statement-breakpoint
CREATE INDEX "runs_unfinished_idx" ON "runs" USING btree ("status","created_at") WHERE "runs"."status" <> 'ended';--> statement-breakpoint
CREATE UNIQUE INDEX "runs_one_active_resume" ON "runs" USING btree ("session_id") WHERE "runs"."kind" = 'resume' and "runs"."status" <> 'ended';--> statement-breakpoint
CREATE INDEX "sessions_resumable_idx" ON "sessions" USING btree ("last_active_at") WHERE "sessions"."status" = 'active' and "sessions"."tail_state" in ('awaiting_model', 'tools_pending', 'interrupted', 'max_output', 'paused');