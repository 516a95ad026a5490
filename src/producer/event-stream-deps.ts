/** What the event streams (event-stream.ts `EventStreams`) are built with. */
import type { FastifyRequest } from "fastify";
import type { Redis } from "ioredis";
import type { EventsCounter } from "../shared/event-writer.js";
import type { EventRetention } from "../shared/events.js";
import type { FleetMetrics } from "../shared/metrics.js";
import type { BatchStore } from "../shared/store/batches.js";
import type { SessionQueries } from "../shared/store/session-queries.js";
import type { TenantSlotLeases } from "./tenant-slot-leases.js";

export type EventStreamDeps = {
  redis: Redis;
  /** A connection of its own for SUBSCRIBE (created lazily by the caller's factory). */
  subscriber: () => Redis;
  prefix: string;
  queries: Pick<SessionQueries, "getSession" | "lastRun">;
  /**
   * `present`: whether the batch is still there (not marked deleted), asked as `sessionStreamOn`
   * is: a batch stream ends once its batch is deleted, before its purge ends it. Absent: never asked.
   */
  batches?: Pick<BatchStore, "view" | "clock" | "hasEnded" | "endedPage" | "endedAt" | "missingRuns"> &
    Partial<Pick<BatchStore, "present">>;
  /** Told of each batch stream dropped because Postgres contradicts it (batch-stream-check.ts). */
  onBatchStreamDropped?: (batchId: string, member: string, fingerprint: string) => void;
  metrics: Pick<FleetMetrics, "sseClients"> &
    Partial<Pick<FleetMetrics, "eventPlacesGone">> & { eventsWritten?: EventsCounter };
  maxStreamsPerTenant: number;
  /** Streams per tenant counted across every API process (tenant-slot-leases.ts); absent: this process's only. */
  tenantSlots?: Pick<TenantSlotLeases, "take">;
  heartbeatMs: number;
  /**
   * How long a write may wait for the reader's socket to drain (FLEET_SSE_STALL_MS) before
   * the connection is closed (event-stream-drain.ts). Absent: 60 s.
   */
  stallMs?: number;
  retention: EventRetention;
  /** How often a reader looks again without being woken (default 1 s). */
  pollMs?: number;
  /**
   * Writes the RUN_COMPLETED of the session's latest ended run when its stream lacks it
   * (`EventWriter.missingRunEnd`); called as a session stream opens and at each heartbeat,
   * so a reader waiting for a run's end whose writer died gets it. Absent: never.
   */
  repairRunEnd?: (sessionId: string) => Promise<unknown>;
  /**
   * As a session stream opens: a tombstone of a session Postgres has again (restored from a
   * backup taken before its delete) goes with its deleted stream, and the stream is written
   * again from Postgres (restored-tombstone.ts). Absent: never.
   */
  restoredTombstone?: (sessionId: string) => Promise<unknown>;
  /**
   * Whether the request that opened a stream may still read it: its key not revoked, still
   * the same tenant's. Asked between the stream's pages and every second while it waits for
   * its reader (answered from auth.ts's 5 s cache), and the stream ends at the first no. Absent: never asked.
   */
  stillAllowed?: (request: FastifyRequest, tenant: string) => Promise<boolean>;
  /**
   * Whether the session still has its stream (`sessionEvents`, turned off by `PATCH
   * /v1/sessions/:id`; null: no longer the tenant's session). Asked when a reader was woken
   * and its stream gave nothing new (the drop wakes it), and at each heartbeat; a session
   * stream ends at the first no, and at the first null with SESSION_DELETED (written then if
   * its stream lacks it: a session of a batch only marked deleted). Absent: never asked.
   */
  sessionStreamOn?: (sessionId: string, tenant: string) => Promise<boolean | null>;
};
