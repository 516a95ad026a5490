-- The method and path an Idempotency-Key was first used with ("POST /v1/batches"): a request
-- with the same key to another method or path is told which one in its 409, never the other
-- request's body. Nullable, no default: adding it rewrites nothing, and keys claimed before
-- (or by a release that does not write it) get the 409's general words.
ALTER TABLE "idempotency_keys" ADD COLUMN "request_line" text;
