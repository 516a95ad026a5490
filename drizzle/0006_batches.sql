CREATE TABLE "batches" (
	"id" text PRIMARY KEY NOT NULL,
	"tenant" text NOT NULL,
	"webhook_url" text,
	"open" boolean DEFAULT false NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"ended_at" timestamp with time zone,
	"cancelled_at" timestamp with time zone,
	"webhook_delivered_at" timestamp with time zone,
	"webhook_failed_at" timestamp with time zone
);
--> statement-breakpoint
CREATE TABLE "idempotency_keys" (
	"tenant" text NOT NULL,
	"key" text NOT NULL,
	"request_hash" text NOT NULL,
	"status_code" integer,
	"response" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "idempotency_keys_tenant_key_pk" PRIMARY KEY("tenant","key")
);
--> statement-breakpoint
ALTER TABLE "sessions" ADD COLUMN "batch_id" text;--> statement-breakpoint
ALTER TABLE "sessions" ADD COLUMN "custom_id" text;--> statement-breakpoint
ALTER TABLE "sessions" ADD COLUMN "cancelled_at" timestamp with time zone;--> statement-breakpoint
CREATE INDEX "batches_unsettled_idx" ON "batches" USING btree ("created_at") WHERE "batches"."ended_at" is null or ("batches"."webhook_url" is not null and "batches"."webhook_delivered_at" is null and "batches"."webhook_failed_at" is null);--> statement-breakpoint
CREATE INDEX "batches_tenant_idx" ON "batches" USING btree ("tenant","created_at");--> statement-breakpoint
CREATE INDEX "idempotency_keys_created_idx" ON "idempotency_keys" USING btree ("created_at");--> statement-breakpoint
CREATE INDEX "sessions_batch_idx" ON "sessions" USING btree ("batch_id","id") WHERE "sessions"."batch_id" is not null;--> statement-breakpoint
CREATE UNIQUE INDEX "sessions_batch_custom_id_idx" ON "sessions" USING btree ("batch_id","custom_id") WHERE "sessions"."batch_id" is not null and "sessions"."custom_id" is not null;--> statement-breakpoint
CREATE INDEX "sessions_batch_pending_idx" ON "sessions" USING btree ("batch_id") WHERE "sessions"."batch_id" is not null and "sessions"."status" = 'active' and ("sessions"."tail_state" <> 'completed' or not "sessions"."run_started");