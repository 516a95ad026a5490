/** The Grafana dashboard of deploy/ as tests read it: its panels, and their queries as Grafana would send them. */
import { readFileSync } from "node:fs";
import { resolve } from "node:path";

export const DASHBOARD_PATH = resolve(
  import.meta.dirname,
  "../../deploy/grafana/dashboards/agent-fleet.json",
);

export type DashboardTarget = { expr: string; refId: string; instant?: boolean };
export type DashboardPanel = {
  id: number;
  type: string;
  title: string;
  targets?: DashboardTarget[];
  panels?: DashboardPanel[];
};

/** Every panel that queries (rows and their nested panels flattened, rows left out). */
export function dashboardPanels(): DashboardPanel[] {
  const dashboard = JSON.parse(readFileSync(DASHBOARD_PATH, "utf8")) as { panels: DashboardPanel[] };
  return dashboard.panels.flatMap((p) => [p, ...(p.panels ?? [])]).filter((p) => p.type !== "row");
}

/**
 * A panel's query with Grafana's variables filled in: $__rate_interval is at least four
 * scrape intervals, $__interval one, $__range the viewed range. Throws on any other variable.
 * `rateIntervalSeconds` sets $__rate_interval instead: the live tests take a rate panel over
 * their whole window with it when Prometheus missed scrapes (support/prometheus-fleet.ts).
 */
export function grafanaExpr(
  expr: string,
  intervalSeconds: number,
  range: string,
  rateIntervalSeconds = 4 * intervalSeconds,
): string {
  const out = expr
    .replaceAll("$__rate_interval", `${rateIntervalSeconds}s`)
    .replaceAll("$__interval", `${intervalSeconds}s`)
    .replaceAll("$__range", range);
  if (out.includes("$")) throw new Error(`a Grafana variable the tests do not know: ${expr}`);
  return out;
}

/** The label names a PromQL expression groups by (`by (a, b)`), `le` excepted. */
export function groupingLabels(expr: string): string[] {
  return [...expr.matchAll(/\bby\s*\(([^)]*)\)/g)]
    .flatMap((m) => m[1]!.split(","))
    .map((l) => l.trim())
    .filter((l) => l && l !== "le");
}
