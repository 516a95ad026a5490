/**
 * The session page's runs table and resume point (session-page.tsx): each run's kind, model,
 * trigger, status, outcome, times and usage, and whether and how the session can be resumed.
 */
import type { ResumePoint, Run } from "./api";
import { Badge, duration, Empty, Json, revealed, Shown, Time } from "./ui";

export function usageText(usage: unknown): string {
  if (!usage || typeof usage !== "object") return "—";
  const u = usage as Record<string, unknown>;
  const parts = [
    typeof u.inputTokens === "number" ? `in ${u.inputTokens}` : "",
    typeof u.outputTokens === "number" ? `out ${u.outputTokens}` : "",
    typeof u.costUsd === "number" && u.costUsd > 0 ? `$${u.costUsd.toFixed(4)}` : "",
    // Steps whose provider reported no usage: the sums miss them.
    typeof u.unknownSteps === "number" && u.unknownSteps > 0
      ? `${u.unknownSteps} step${u.unknownSteps === 1 ? "" : "s"} without usage`
      : "",
  ].filter(Boolean);
  return parts.length > 0 ? parts.join(", ") : JSON.stringify(usage);
}

/**
 * A run's MODEL in a few words: its endpoint or provider, and its model name, each isolated
 * (a right-to-left endpoint drew the model's name on its left).
 */
function ModelLabel({ model }: { model: unknown }) {
  const m = (typeof model === "object" && model !== null ? model : {}) as Record<string, unknown>;
  const where =
    typeof m.endpoint === "string" ? m.endpoint : typeof m.provider === "string" ? m.provider : "model";
  return (
    <>
      <Shown text={where} />
      {typeof m.model === "string" && (
        <>
          :<Shown text={m.model} />
        </>
      )}
    </>
  );
}

export function Runs({ runs }: { runs: Run[] }) {
  return (
    <section aria-labelledby="runs-title">
      <h2 id="runs-title">Runs ({runs.length})</h2>
      {runs.length === 0 ? (
        <Empty>No runs yet.</Empty>
      ) : (
        <div class="scroll">
          <table class="runs">
            <thead>
              <tr>
                <th scope="col">Run</th>
                <th scope="col">Kind</th>
                <th scope="col">Resume kind</th>
                <th scope="col">Trigger</th>
                <th scope="col">Status</th>
                <th scope="col">Outcome (endedReason)</th>
                <th scope="col">Queued</th>
                <th scope="col">Started</th>
                <th scope="col">Took</th>
                <th scope="col">Usage</th>
              </tr>
            </thead>
            <tbody>
              {runs.map((run) => (
                <tr key={run.id} class={`run ${run.status}`}>
                  <td class="mono" title={revealed(`${run.id}${run.workerId ? ` on ${run.workerId}` : ""}`)}>
                    <Shown text={run.id.slice(0, 8)} />
                  </td>
                  <td class="free">
                    <div>
                      <Shown text={run.kind} />
                      {run.model != null && (
                        <div class="muted small run-model">
                          on <ModelLabel model={run.model} />
                        </div>
                      )}
                    </div>
                  </td>
                  <td>
                    <Shown text={run.resumeKind} />
                  </td>
                  <td>
                    <Shown text={run.trigger} />
                  </td>
                  <td>
                    <Badge kind={run.status === "ended" ? "" : "busy"}>{run.status}</Badge>
                  </td>
                  <td class="free">
                    <div>
                      <span class="outcome">
                        <Shown text={run.endedReason} />
                      </span>
                      {run.error && (
                        <div class="muted small">
                          <Shown text={run.error} />
                        </div>
                      )}
                    </div>
                  </td>
                  <td>
                    <Time iso={run.createdAt} />
                  </td>
                  <td>
                    <Time iso={run.startedAt} />
                  </td>
                  <td>
                    {duration(run.startedAt, run.endedAt)}
                    {run.timings && (
                      <details>
                        <summary>timings</summary>
                        <Json value={run.timings} />
                      </details>
                    )}
                  </td>
                  <td>
                    <Shown text={usageText(run.usage)} />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}

export function ResumePointView({ point }: { point: ResumePoint | null }) {
  return (
    <section aria-labelledby="point-title">
      <h2 id="point-title">Resume point</h2>
      {!point ? (
        <p class="muted">…</p>
      ) : point.resumable ? (
        <div>
          <p>
            <Badge kind="busy">
              resumable: <Shown text={point.kind} />
            </Badge>{" "}
            <Shown text={point.description} />
          </p>
          {point.unansweredToolCalls.length > 0 && (
            <details>
              <summary>{point.unansweredToolCalls.length} unanswered tool call(s)</summary>
              <Json value={point.unansweredToolCalls} />
            </details>
          )}
        </div>
      ) : (
        <p>
          <Badge kind={point.reason === "completed" ? "ok" : "warn"}>
            not resumable: <Shown text={point.reason} />
          </Badge>
        </p>
      )}
    </section>
  );
}
