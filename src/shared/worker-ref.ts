/**
 * A worker as its tenants see it (pure). A worker's id is `<host name>-<pid>-<8 hex>`
 * (worker.ts): operators match it in logs, metrics, Redis's CLIENT LIST and the database, and
 * it names the machine it runs on. A run's `workerId` in the API (`GET /v1/sessions/:id`,
 * `GET /v1/runs/:id`) and so in the console is `worker-<8 hex>` instead: the id's random end,
 * which says nothing of the host or the process, stays the same for one worker and differs
 * between workers, and is the end of the id in the operator's logs (`grep 0a1b2c3d`).
 */
import { createHash } from "node:crypto";

const RANDOM_END = /-([0-9a-f]{8})$/;

/** The id a tenant reads for the worker `workerId` (null: no worker took the run). */
export function tenantWorkerId(workerId: string | null): string | null {
  if (workerId === null) return null;
  const end = RANDOM_END.exec(workerId)?.[1];
  // An id of another form (an older release's): a digest, so that no part of it shows.
  return `worker-${end ?? createHash("sha256").update(workerId).digest("hex").slice(0, 8)}`;
}
