-- A tenant's sessions mid-run or between an interrupted run's end and its automatic resume
-- (store/active-sessions.ts): FLEET_TENANT_MAX_ACTIVE_SESSIONS counts them with the tenant's
-- unended runs, so that a session whose run ended interrupted keeps its place until its resume
-- is queued. The sessions in flight, not all of them: its predicate is sessions_attention_idx's.
-- IF NOT EXISTS: on a large table, build it first by hand with CREATE INDEX CONCURRENTLY (same
-- definition), and this migration takes no lock while it builds.
CREATE INDEX IF NOT EXISTS "sessions_tenant_attention_idx" ON "sessions" USING btree ("tenant") WHERE "sessions"."status" = 'active' and "sessions"."run_started" and "sessions"."tail_phase" = 'open';
