-- Room on each page of `sessions` for the next version of its rows. A session's row is updated
-- on every append (last_seq, tail_state, tokens_used, last_active_at), and an append changes no
-- indexed column, so Postgres can update it in place (HOT: no index entry written) when the
-- new version fits on the row's page. With full pages (the default fillfactor 100: a batch's
-- sessions are inserted side by side), it mostly did not fit: the version went to another page
-- and every index of `sessions` got a new entry (six for a session mid-run).
-- Storage parameters only: ShareUpdateExclusiveLock, so reads and writes go on. Rows stored
-- before keep their pages as they are until they are updated and moved.
ALTER TABLE "sessions" SET (fillfactor = 60);
