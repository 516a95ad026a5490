-- What a parking still owes its announcement (store/park-announcements.ts): SESSION_PARKED, the
-- RUN_COMPLETED of the runs it ended, fleet_sessions_parked_total. Set in the parking's own
-- transaction, cleared by whoever wrote and counted them; a sweep finishes those whose parker
-- never did (its answer lost after the commit, its process killed). A nullable column with no
-- default: nothing is rewritten.
ALTER TABLE "sessions" ADD COLUMN "park_announcement" jsonb;--> statement-breakpoint
-- IF NOT EXISTS: on a large table, build it first by hand with CREATE INDEX CONCURRENTLY (same
-- definition), and this migration takes no lock while it builds. It holds a handful of rows.
CREATE INDEX IF NOT EXISTS "sessions_park_announcement_idx" ON "sessions" USING btree ("updated_at") WHERE "sessions"."park_announcement" is not null;
