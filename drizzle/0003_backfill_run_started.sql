-- Sessions that existed before run_started: a session any run of which has started keeps
-- being resumed automatically; imported histories that never ran stay untouched.
UPDATE "sessions" SET "run_started" = true
 WHERE EXISTS (SELECT 1 FROM "runs" WHERE "runs"."session_id" = "sessions"."id" AND "runs"."status" <> 'queued');
