CREATE TABLE "session_deletions" (
	"session_id" text PRIMARY KEY NOT NULL,
	"tenant" text NOT NULL,
	"deleted_at" timestamp with time zone DEFAULT now() NOT NULL,
	"claimed_until" timestamp with time zone DEFAULT now() NOT NULL,
	"attempts" integer DEFAULT 0 NOT NULL
);
--> statement-breakpoint
CREATE INDEX "session_deletions_claim_idx" ON "session_deletions" USING btree ("claimed_until");