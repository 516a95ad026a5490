/** What the HTTP API is built with (http-api.ts `buildApi`): the service, auth, and optional parts. */
import type { FastifyInstance } from "fastify";
import type { Registry } from "prom-client";
import type { FleetMetrics } from "../shared/metrics.js";
import type { IdempotencyStore } from "../shared/store/idempotency.js";
import type { AuthFailureLimiter } from "./auth-failures.js";
import type { RequestSite } from "./cross-site.js";
import type { Deletions } from "./deletions.js";
import type { EventStreams } from "./event-stream.js";
import type { FleetService } from "./fleet-service.js";
import type { SessionEventsSwitch } from "./session-events-switch.js";
import type { TenantSlotLeases } from "./tenant-slot-leases.js";

export type ApiDeps = {
  service: FleetService;
  /** Who is calling: the tenant of an `Authorization` header, or UnauthorizedError. */
  auth: {
    /** `from`: the request's headers (dev mode reads Host, Origin and Sec-Fetch-Site). */
    authenticate(header: string | undefined, from?: RequestSite): Promise<string>;
    /** Admits a request to an admin route, or throws UnauthorizedError (401/403). */
    authenticateAdmin(header: string | undefined, from?: RequestSite): Promise<void>;
    /** Whether the header's key was valid lately (auth.ts): looked up even from a limited address. */
    recognises?(header: string | undefined): boolean;
  };
  /** Failed authentications per client address (auth-failures.ts); absent: no limit. */
  authFailures?: Pick<AuthFailureLimiter, "retryAfter" | "failed" | "limit" | "begin">;
  /** Fastify's `trustProxy` (FLEET_API_TRUST_PROXY): whose X-Forwarded-For names the client. */
  trustProxy?: boolean | number | string;
  /** `Idempotency-Key` on `POST /v1/…` (contracts §9); without it the header is ignored. */
  idempotency?: Pick<IdempotencyStore, "begin" | "wait" | "complete" | "release"> &
    Partial<Pick<IdempotencyStore, "renew">>;
  /** A tenant's request rate (request-rate.ts): throws TooManyRequestsError when over it. */
  rate?: { admit(tenant: string): Promise<void> };
  /** Admin routes under ADMIN_PREFIX (Bull Board), registered on the app; behind admin keys. */
  admin?: (app: FastifyInstance) => Promise<void>;
  /** The console's page and assets under `/console` (console-route.ts), served without a key. */
  console?: (app: FastifyInstance) => Promise<void>;
  registry: Registry;
  /** Refused keys (401) and 429 answers by limit; absent: not counted. */
  metrics?: Pick<FleetMetrics, "authFailures" | "requestsLimited">;
  healthy: () => Promise<boolean>;
  /** `DELETE /v1/sessions/:id` and `DELETE /v1/batches/:id` (deletions.ts); absent: 404 for every id. */
  deletions?: Pick<Deletions, "deleteSession" | "deleteBatch">;
  /** `PATCH /v1/sessions/:id` (session-events-switch.ts); absent: 404 for every id. */
  sessionEvents?: Pick<SessionEventsSwitch, "patch">;
  /**
   * `GET /v1/webhook-secret`: the secret that signs the tenant's webhooks, when it is the
   * tenant's own (FLEET_WEBHOOK_SECRET_PER_TENANT, webhook-secrets.ts); undefined or absent: 404.
   */
  webhookSecret?: (tenant: string) => Promise<string | undefined> | string | undefined;
  /**
   * `POST /v1/webhook-secret/rotate`: moves the tenant's own secret to its next generation
   * (webhook-secret-routes.ts) and answers its generation, and until when the one it replaced
   * still signs too; undefined or absent: 404, as the GET.
   */
  rotateWebhookSecret?: (
    tenant: string,
  ) => Promise<{ generation: number; previousValidUntil: string } | undefined>;
  /** Event streams (contracts §7, SSE); absent: their routes answer 404 for every id. */
  events?: EventStreams;
  /** The package's version, for the OpenAPI document. */
  version?: string;
  /** pino level for the API's log; "silent" for none. */
  logLevel?: string;
  /** How long a request may take to arrive, headers and body (408 after); default REQUEST_TIMEOUT_MS. */
  requestTimeoutMs?: number;
  /**
   * How long a streamed answer (a batch's results, stalled-answers.ts) or a big session's whole
   * answer (big-answers.ts: its place freed) waits for a reader that takes nothing before its
   * connection is closed (FLEET_SSE_STALL_MS); default 60 s.
   */
  answerStallMs?: number;
  /**
   * Batch results reads one tenant may hold open at once (tenant-read-slots.ts,
   * FLEET_RESULTS_MAX_READS_PER_TENANT); default DEFAULT_RESULTS_READS_PER_TENANT.
   */
  resultsReadsPerTenant?: number;
  /**
   * Places per tenant counted across every API process (tenant-slot-leases.ts: results reads);
   * absent: each process counts its own.
   */
  tenantSlots?: Pick<TenantSlotLeases, "take">;
  /** Big request bodies worked on at once, and waiting (big-bodies.ts); default DEFAULT_BIG_BODIES. */
  bigBodies?: { max: number; waiting: number };
};
