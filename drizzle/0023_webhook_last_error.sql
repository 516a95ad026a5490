-- Why a batch webhook's last delivery attempt failed, or why it was given up (webhook.lastError in
-- GET /v1/batches/:id). A nullable column with no default: no rewrite of batches, a brief lock.
ALTER TABLE "batches" ADD COLUMN "webhook_last_error" text;