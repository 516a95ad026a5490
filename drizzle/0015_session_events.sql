ALTER TABLE "batches" ADD COLUMN "session_events" boolean DEFAULT true NOT NULL;--> statement-breakpoint
ALTER TABLE "sessions" ADD COLUMN "session_events" boolean DEFAULT true NOT NULL;