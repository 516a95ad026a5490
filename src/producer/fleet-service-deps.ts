/** What a FleetService is built with: the store, the queues, and the hooks around its actions. */
import type { FleetMetrics } from "../shared/metrics.js";
import type { ModelRouting } from "../shared/model-endpoints.js";
import type { RunQueues } from "../shared/queues.js";
import type { BatchStore } from "../shared/store/batches.js";
import type { RunLimits, SessionQueries } from "../shared/store/session-queries.js";
import type { FleetToolNames } from "../shared/tool-names.js";
import type { WebhookSettings } from "../shared/webhooks.js";
import type { Priorities } from "./fair-dispatch.js";

export type FleetServiceDeps = {
  queries: SessionQueries;
  queues: Pick<RunQueues, "enqueue" | "enqueueMany" | "getJob">;
  metrics: Pick<FleetMetrics, "resumeRefusals" | "runs">;
  /** The tool names workers registered (tool-names.ts). */
  toolNames: Pick<FleetToolNames, "known">;
  /**
   * Declared endpoints and allowed raw base URLs (contracts.md §11), from the same
   * configuration the workers load: a MODEL they would refuse is a 400 here.
   */
  models: Pick<ModelRouting, "endpoints" | "allowedBaseUrls">;
  /** Per-tenant limits checked where runs are queued (contracts §10). */
  limits?: RunLimits;
  /** Fair priorities for new runs (fair-dispatch.ts); none: first in, first out. */
  priorities?: Priorities;
  /**
   * Fair priorities for the resumes callers ask for (`POST …/resume`, a batch's resume),
   * so one tenant's many resumes do not starve another's; none: first in, first out.
   * Automatic resumes carry no priority and go ahead of them.
   */
  resumePriorities?: Priorities;
  /** Batches, their counts and results, and cancellation (contracts §9). */
  batches?: BatchStore;
  /**
   * Tells workers to abort the runs of cancelled sessions (worker-signals.ts `cancelChannel`):
   * `runIds`, the runs the cancel found running, and those only (a run a new message started
   * after the cancel is not the cancel's to abort).
   */
  cancelSignal?: (sessionIds: string[], runIds: string[]) => Promise<void>;
  /**
   * Forgets the waiting requests of handed-back runs a cancel ended (provider-limits.ts
   * `forget`): their tenant stops counting as waiting for the endpoint's permits at once.
   */
  waitsGone?: (tenant: string, runIds: string[]) => Promise<void>;
  /** Webhook URL checks (webhooks.ts). */
  webhooks?: WebhookSettings;
  /**
   * Writes the RUN_COMPLETED of runs a cancel ended while they were queued (contracts §7:
   * every run ends with exactly one). Absent: no events.
   */
  runEnded?: (sessionId: string, runId: string, outcome: "cancelled") => Promise<void>;
  /** Told when committed runs' jobs could not be added (Redis away); the sweeper adds them. */
  onEnqueueFailed?: (error: unknown, runIds: string[]) => void;
};
