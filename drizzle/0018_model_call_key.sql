-- The key of the last model call counted in "model_calls" (FencedWrites.reserveModelCall): a
-- reservation sent again after its answer was lost (a worker riding out a Postgres outage)
-- finds its own key and is not counted twice against agent.budget.maxModelCalls.
ALTER TABLE "sessions" ADD COLUMN "model_call_key" text;
