/**
 * A session as the API answers it: whole or a page of its messages and runs
 * (`GET /v1/sessions/:id`), or as a line of the session list (`GET /v1/sessions`).
 */
import type { z } from "zod";
import type { SessionJson, SessionSummary } from "../shared/api-types.js";
import type { RunRow, SessionRow } from "../shared/db/schema.js";
import { totalUsage } from "../shared/prices.js";
import { runToJson } from "../shared/store/rows.js";
import type { ListCursor, ListedSession, SessionQueries } from "../shared/store/session-queries.js";
import {
  DEFAULT_SESSION_RUNS_PAGE,
  encodeListCursor,
  type sessionQuery,
  sessionStatus,
} from "./request-bodies.js";
import { MAX_SESSION_PAGE_BYTES } from "./request-limits.js";

/**
 * `query.afterSeq`: only the messages after that seq (a reader that has the ones before,
 * such as the console following a long session); `query.limit`: at most that many, and no
 * more than fit in about MAX_SESSION_PAGE_BYTES (at least one), with `nextAfterSeq`; `query.runsLimit`/`runsBefore`: a page of runs, latest first, with
 * `nextRunsBefore`. The session's `usage` and `status` are still its whole.
 */
export async function sessionView(
  queries: SessionQueries,
  tenant: string,
  session: SessionRow,
  query: z.infer<typeof sessionQuery>,
): Promise<SessionJson> {
  const { id } = session;
  const { afterSeq = 0, limit, runsLimit, runsBefore } = query;
  const runPage =
    runsLimit === undefined && runsBefore === undefined
      ? undefined
      : { limit: runsLimit ?? DEFAULT_SESSION_RUNS_PAGE, before: runsBefore };
  const [loaded, runs, usages] = await Promise.all([
    limit === undefined
      ? queries.loadHistory(id, afterSeq).then((messages) => ({ messages, more: false }))
      : queries.loadHistoryPage(id, afterSeq, limit, MAX_SESSION_PAGE_BYTES),
    runPage ? runsPage(queries, id, tenant, runPage) : queries.listRuns(id, tenant).then((all) => ({ all })),
    afterSeq > 0 || limit !== undefined ? queries.usageTotals(id) : null,
  ]);
  const { messages } = loaded;
  const shown = "all" in runs ? runs.all : runs.page;
  return {
    id: session.id,
    status: sessionStatus(session, "all" in runs ? runs.all : runs.unfinished),
    tailState: session.tailState,
    parkedReason: session.parkedReason,
    agent: session.agent,
    metadata: session.metadata,
    messages,
    runs: shown.map(runToJson),
    usage: usages ?? totalUsage(messages.flatMap((m) => (m.role === "assistant" ? [m.usage] : []))),
    spent: { modelCalls: session.modelCalls, tokens: session.tokensUsed },
    createdAt: session.createdAt.toISOString(),
    updatedAt: session.updatedAt.toISOString(),
    ...(session.sessionEvents ? {} : { sessionEvents: false as const }),
    ...(limit === undefined ? {} : { nextAfterSeq: loaded.more ? (messages.at(-1)?.seq ?? null) : null }),
    ...("all" in runs ? {} : { nextRunsBefore: runs.next }),
  };
}

/** A page of a session's runs (latest first), the `nextRunsBefore` of the older ones, and its unfinished runs. */
async function runsPage(
  queries: SessionQueries,
  id: string,
  tenant: string,
  page: { limit: number; before?: ListCursor },
): Promise<{ page: RunRow[]; next: string | null; unfinished: Pick<RunRow, "status">[] }> {
  const [rows, unfinished] = await Promise.all([
    // One more than asked: whether older runs exist.
    page.limit === 0 ? [] : queries.listRunsPage(id, tenant, { limit: page.limit + 1, before: page.before }),
    queries.unfinishedRunStatuses(id),
  ]);
  const older = rows.length > page.limit;
  const shown = older ? rows.slice(1) : rows;
  return {
    page: shown,
    next: older && shown[0] ? encodeListCursor(shown[0].cursor) : null,
    unfinished: unfinished.map((status) => ({ status })),
  };
}

/** A session as a line of the list, its status from its unfinished run's. */
export function sessionSummary(row: ListedSession): SessionSummary {
  return {
    id: row.id,
    batchId: row.batchId,
    customId: row.customId,
    status: sessionStatus(row, row.runState ? [{ status: row.runState }] : []),
    parked: row.status === "parked",
    tailState: row.tailState,
    parkedReason: row.parkedReason,
    metadata: row.metadata,
    updatedAt: row.updatedAt.toISOString(),
  };
}
