-- Contracts §10: of a key only its hash is stored. The display prefix kept the first four characters of
-- a key's secret (`fk_<id>_Qx7m…`); it keeps only the key's id part now (`fk_<id>_…`), and a key of
-- another form (FLEET_BOOTSTRAP_KEY) is shown by the start of its hash.
UPDATE "api_keys" SET "prefix" = substring("prefix" from '^(fk_[^_]+_)') || '…' WHERE "prefix" ~ '^fk_[^_]+_';--> statement-breakpoint
UPDATE "api_keys" SET "prefix" = 'sha256:' || left("hash", 8) || '…' WHERE "prefix" !~ '^fk_[^_]+_' AND "prefix" !~ '^sha256:';
