-- The bytes of each session's stored history, counted by every append in its own statement
-- (store/history-bytes.ts), so that an imported page's size check adds to it instead of summing
-- every stored message again. Constant defaults: no rewrite of `sessions`, a brief lock. Rows
-- from before it (history_bytes_seq 0) are counted once, at their first imported page, not here:
-- a back-fill would update every session's row in the migrations' transaction.
ALTER TABLE "sessions" ADD COLUMN "history_bytes" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "sessions" ADD COLUMN "history_bytes_seq" integer DEFAULT 0 NOT NULL;