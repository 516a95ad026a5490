-- Contracts §10: of a key only its hash is stored. The display prefix kept the first four characters of
-- a key's secret (`fk_<id>_Qx7m…`); it keeps only the key's id part now (`fk_<id>_…`), and the bootstrap
-- key (FLEET_BOOTSTRAP_KEY, id `boot…`; created keys' ids are hex) is shown by the start of its hash.
UPDATE "api_keys" SET "prefix" = 'fk_' || "id" || '_…' WHERE "id" NOT LIKE 'boot%' AND "prefix" LIKE 'fk\_' || "id" || '\_%';--> statement-breakpoint
UPDATE "api_keys" SET "prefix" = 'sha256:' || left("hash", 8) || '…' WHERE ("id" LIKE 'boot%' OR "prefix" NOT LIKE 'fk\_' || "id" || '\_%') AND "prefix" NOT LIKE 'sha256:%';
