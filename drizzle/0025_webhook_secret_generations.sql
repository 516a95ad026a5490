-- Each tenant's webhook signing secret's generation (POST /v1/webhook-secret/rotate); a tenant
-- without a row is at generation 0. A new table: no lock on any other.
CREATE TABLE "webhook_secret_generations" (
	"tenant" text PRIMARY KEY NOT NULL,
	"generation" integer NOT NULL,
	"rotated_at" timestamp with time zone DEFAULT now() NOT NULL,
	"previous_valid_until" timestamp with time zone NOT NULL
);
