-- A session's runs are taken in the order they were queued under the session's row lock
-- (`queue_seq`, from a sequence, taken as the run's row is inserted, after that lock), no longer
-- by `created_at`: that is its transaction's start (`now()`), and a message whose transaction
-- began before an explicit resume was accepted, but that took the session's row after it, ran
-- first; the accepted resume then found the history completed and ended nothing_to_resume.
-- CACHE 1 (the default) matters: with a cache, each connection would hand out numbers from its
-- own range, and a run queued later could get a smaller one.
CREATE SEQUENCE "public"."runs_queue_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1;--> statement-breakpoint
-- A constant default first: adding the column rewrites nothing, and runs that have ended keep 0
-- (they are only ever ordered among themselves, by `queue_seq, created_at, id`).
ALTER TABLE "runs" ADD COLUMN "queue_seq" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
-- Runs not ended yet (read by runs_unfinished_idx), numbered in the order they were taken until
-- now; the sequence goes on after them. The table stays locked (ACCESS EXCLUSIVE, from the
-- ALTER TABLE) until the migration commits, so no run is inserted in between.
UPDATE "runs" SET "queue_seq" = "o"."n"
  FROM (SELECT "id", row_number() OVER (ORDER BY "created_at", "id") AS "n" FROM "runs" WHERE "status" <> 'ended') "o"
 WHERE "runs"."id" = "o"."id";--> statement-breakpoint
SELECT setval('"public"."runs_queue_seq"', (SELECT count(*) + 1 FROM "runs" WHERE "status" <> 'ended'), false);--> statement-breakpoint
ALTER TABLE "runs" ALTER COLUMN "queue_seq" SET DEFAULT nextval('runs_queue_seq');--> statement-breakpoint
DROP INDEX "runs_session_idx";--> statement-breakpoint
DROP INDEX "runs_session_state_idx";--> statement-breakpoint
CREATE INDEX "runs_session_idx" ON "runs" USING btree ("session_id","queue_seq","created_at","id");--> statement-breakpoint
CREATE INDEX "runs_session_state_idx" ON "runs" USING btree ("session_id","status","queue_seq");
