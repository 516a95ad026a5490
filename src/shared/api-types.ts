/**
 * The JSON the HTTP API answers, as types: what `FleetClient` returns and the package
 * exports. They live here, apart from the stores and services that build them, so that the
 * client's declarations reach no database or queue library: a consumer that type-checks
 * its dependencies (`skipLibCheck: false`) compiles against `agent-fleet/client` without
 * drizzle-orm's declarations, which do not check on their own.
 */
import type { StoredMessage } from "./messages.js";
import type { ResumeKind } from "./resume-reasons.js";

/** Summed usage of steps or sessions (totalUsage here; store/session-usage.ts for many sessions in SQL). */
export type UsageTotals = {
  inputTokens: number;
  outputTokens: number;
  cacheReadTokens: number;
  cacheWriteTokens: number;
  reasoningTokens: number;
  costUsd: number;
  /**
   * Model steps whose provider reported no usage (their `usage` is null: a step cut short,
   * a provider or import without it). The sums above count nothing for them, so a total
   * of 0 with `unknownSteps` > 0 means "not known", not "free".
   */
  unknownSteps: number;
};

/** Where a run is (`GET /v1/runs/:id`, `runs[]`): `ended` with its `endedReason`. */
export const RUN_STATUSES = ["queued", "running", "ended"] as const;
export type RunStatus = (typeof RUN_STATUSES)[number];

export type RunJson = {
  id: string;
  /** `run`: new input; `resume`: a resume. */
  kind: "run" | "resume";
  resumeKind: string | null;
  trigger: string;
  status: RunStatus;
  endedReason: string | null;
  error: string | null;
  /**
   * The worker that took it, as `worker-<8 hex>`: the random end of the worker's id in the
   * operator's logs, never its host name or pid (worker-ref.ts); null before a worker took it.
   */
  workerId: string | null;
  /**
   * The MODEL this run was asked to use in the agent's model's place — the one a caller's
   * resume named, a fallback the sweeper chose, or one an automatic resume kept — as stored
   * (additive); null when it runs on the agent's own model.
   */
  model: unknown;
  usage: unknown;
  createdAt: string;
  startedAt: string | null;
  endedAt: string | null;
};

/** What `GET /v1/sessions/:id` says a session is doing (README, HTTP API). */
export const SESSION_STATUSES = [
  "queued",
  "running",
  "completed",
  "interrupted",
  "stopped",
  "parked",
  "cancelled",
  "empty",
] as const;
export type SessionStatus = (typeof SESSION_STATUSES)[number];

export type SessionSummary = {
  id: string;
  batchId: string | null;
  customId: string | null;
  /** What it is doing, as `GET /v1/sessions/:id` says (additive). */
  status: SessionStatus;
  parked: boolean;
  tailState: string;
  parkedReason: string | null;
  metadata: Record<string, unknown>;
  updatedAt: string;
};

export type SessionJson = {
  id: string;
  status: SessionStatus;
  tailState: string;
  parkedReason: string | null;
  agent: unknown;
  metadata: Record<string, unknown>;
  messages: StoredMessage[];
  runs: RunJson[];
  /** Its model steps' stored usage summed, with their cost (prices.ts; additive, contracts §13). */
  usage: UsageTotals;
  /**
   * What `agent.budget` has counted for it across all its runs (additive): `modelCalls` (counted
   * as they are made for an agent with `budget.maxModelCalls`, and one per imported step) and
   * `tokens` (its steps' reported usage, failed attempts' billed tokens, estimates for steps of
   * unknown usage). `fleet session export` carries it, so an import keeps it (imported-spent.ts).
   */
  spent?: { modelCalls: number; tokens: number };
  createdAt: string;
  updatedAt: string;
  /** Present (false) when it has no event stream (`sessionEvents: false`, at its creation or by `PATCH /v1/sessions/:id`; additive). */
  sessionEvents?: false;
  /** With `?limit=`: the `afterSeq` of the next page, null when no message follows this page. */
  nextAfterSeq?: number | null;
  /** With `?runsLimit=` or `?runsBefore=`: the `runsBefore` of the older runs, null when none is older. */
  nextRunsBefore?: string | null;
};

export type BatchCreated = {
  id: string;
  sessions: { id: string; runId: string | null; customId: string | null }[];
  webhook?: { url: string };
};

export type BatchCounts = {
  total: number;
  queued: number;
  running: number;
  completed: number;
  parked: number;
  cancelled: number;
};

export type BatchJson = {
  id: string;
  status: "running" | "ended" | "cancelled";
  counts: BatchCounts;
  createdAt: string;
  endedAt?: string;
  /** When a cancel was asked for (additive). */
  cancelledAt?: string;
  /** Whether the batch still takes sessions (`POST /v1/batches/:id/sessions`; additive). */
  open: boolean;
  /** Present (false) when its sessions have no event streams (created with `sessionEvents: false`; additive). */
  sessionEvents?: false;
  /** `failedAt`: when its delivery was given up (its attempts spent; additive), only then. */
  /**
   * `lastError` (additive): why the last attempt failed, or why the delivery was given up; one
   * line of at most 300 characters, never the receiver's answer body. Absent until one fails.
   */
  webhook?: { url: string; deliveredAt: string | null; failedAt?: string; lastError?: string };
};

export type BatchResult = {
  customId: string | null;
  sessionId: string;
  status: "queued" | "running" | "completed" | "parked" | "cancelled";
  parkedReason?: string;
  output: string | null;
  /** The session's model steps' usage summed, with cost by FLEET_PRICES (prices.ts). */
  usage: UsageTotals;
  endedAt: string | null;
};

export type BatchResumePage = {
  resumed: { sessionId: string; runId: string; kind: ResumeKind }[];
  /** Parked sessions with nothing to resume (`refused`, `context_full`, …); they stay parked. */
  refused: { sessionId: string; reason: string }[];
  /** The next page's `cursor`; null when the pass is over. */
  nextCursor: string | null;
  /** A tenant limit stopped the page early: ask for `nextCursor` again after this long. */
  retryAfterSeconds?: number;
};
