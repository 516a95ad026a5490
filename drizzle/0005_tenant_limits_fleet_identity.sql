CREATE TABLE "fleet_identity" (
	"id" integer PRIMARY KEY DEFAULT 1 NOT NULL,
	"prefix" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "api_keys" ADD COLUMN "admin" boolean DEFAULT false NOT NULL;--> statement-breakpoint
CREATE INDEX "runs_tenant_active_idx" ON "runs" USING btree ("tenant","session_id") WHERE "runs"."status" <> 'ended';