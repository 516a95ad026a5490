/** The public API of the agent-fleet package. */
export {
  type BatchCreated,
  type BatchJson,
  type BatchResult,
  type BatchResumePage,
  type BatchSessionInput,
  type EventsOptions,
  FleetApiError,
  FleetClient,
  type FleetEvent,
  type FleetEventDataByType,
  type FleetEventType,
  FleetNetworkError,
  type Goal,
  isEventType,
  type KnownFleetEvent,
  type OtherFleetEvent,
  type PostOptions,
  type RunStatus,
  type RunWithSession,
  type SessionPageOptions,
  verifyWebhookSignature,
} from "./producer/client.js";
export type { SessionJson, SessionStatus, SessionSummary } from "./producer/fleet-service.js";
export {
  type AgentConfig,
  type AgentConfigInput,
  type ModelConfig,
  parseAgentConfig,
} from "./shared/agent-config.js";
export { type FleetConfig, loadConfig } from "./shared/config.js";
export { AgentResumeError, FencedError, NotFoundError, ValidationError } from "./shared/errors.js";
export type { SessionEvent } from "./shared/events.js";
export { type Message, parseHistory, type StoredMessage, type ToolCall } from "./shared/messages.js";
export type { UsageTotals } from "./shared/prices.js";
export {
  CONTINUE_RESPONSE_TEXT,
  closeUnansweredToolCalls,
  INTERRUPTED_TOOL_TEXT,
  planResume,
  RETRY_RESPONSE_TEXT,
  resumeAppends,
} from "./shared/resume-plan.js";
export {
  type ResumeKind,
  type ResumePoint,
  type ResumePointJson,
  resumePoint,
  toResumePointJson,
} from "./shared/resume-point.js";
export type { RunJson } from "./shared/store/rows.js";
export {
  type CommittedMessage,
  type DeletedContext,
  defineExtension,
  type Extension,
  type RunContext,
  RunError,
  type RunResult,
} from "./worker/extensions.js";
export type { ModelEvent, ModelProvider, ModelRequest, ToolSpec } from "./worker/models/provider.js";
export { ProviderError } from "./worker/models/provider.js";
export { defineTool, type Tool, type ToolContext, ToolRegistry } from "./worker/tools/registry.js";
export { transcriptExtension } from "./worker/transcript-extension.js";
export { type RunningWorker, startWorker, type WorkerOptions } from "./worker/worker.js";
