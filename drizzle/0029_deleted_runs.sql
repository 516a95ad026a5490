-- Runs a delete found running (store/data-deletion.ts), written in the statement that deleted
-- their session: the delete's signal to their workers is a Redis publish, lost while Redis is
-- away, and the runs' rows go with the session. The sweeper sends the signal again while the
-- session's lease is held, then forgets the row (sweeper/deleted-runs.ts). A handful of rows.
CREATE TABLE "deleted_runs" (
	"run_id" text PRIMARY KEY NOT NULL,
	"session_id" text NOT NULL,
	"deleted_at" timestamp with time zone DEFAULT now() NOT NULL
);
