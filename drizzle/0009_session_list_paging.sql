DROP INDEX "sessions_tenant_updated_idx";--> statement-breakpoint
CREATE INDEX "sessions_batch_updated_idx" ON "sessions" USING btree ("batch_id","updated_at","id") WHERE "sessions"."batch_id" is not null;--> statement-breakpoint
CREATE INDEX "sessions_tenant_parked_idx" ON "sessions" USING btree ("tenant","updated_at","id") WHERE "sessions"."status" = 'parked';--> statement-breakpoint
CREATE INDEX "sessions_tenant_updated_idx" ON "sessions" USING btree ("tenant","updated_at","id");