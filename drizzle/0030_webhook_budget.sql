-- A webhook's one retry budget in Postgres (sweeper/batch-ends.ts): the attempts that failed,
-- so that a delivery job lost with Redis (FLUSHALL, a restart without persistence) is queued
-- anew where its attempts left off, not with 40 fresh ones and a new day.
ALTER TABLE "batches" ADD COLUMN "webhook_attempts" integer DEFAULT 0 NOT NULL;
