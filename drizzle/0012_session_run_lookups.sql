-- IF NOT EXISTS: on a large table, build it first by hand with CREATE INDEX CONCURRENTLY (same
-- definition), and this migration takes no lock while it builds.
CREATE INDEX IF NOT EXISTS "runs_session_state_idx" ON "runs" USING btree ("session_id","status","created_at","id");--> statement-breakpoint
-- Statistics that follow batches: the plans of claims and run ends depend on how many runs
-- are queued or running, which a batch changes at once; by default a large table is analyzed
-- only after 10 % of it changed (a batch of 100,000 runs on 10,000,000 never triggers it).
ALTER TABLE "runs" SET (autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 10000);--> statement-breakpoint
ALTER TABLE "sessions" SET (autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 10000);
