/** Small PromQL helpers for the tests of deploy/: metric names a query reads, and the rules files. */
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { parse } from "yaml";
import {
  createMetrics,
  initRunProgress,
  initSweeperIntervals,
  initSweeperPasses,
  initWorkerLiveness,
} from "../../src/shared/metrics.js";
import { PROMETHEUS_DIR } from "./prometheus.js";

const KEYWORDS = new Set(["and", "or", "unless", "bool", "offset", "inf", "nan", "by", "without"]);

/** Metric names a PromQL expression selects (not functions, labels, keywords or numbers). */
export function metricNames(expr: string): string[] {
  const stripped = expr
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""')
    .replace(/\{[^}]*\}/g, " ")
    .replace(/\[[^\]]*\]/g, " ")
    .replace(/\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, " ");
  const names = new Set<string>();
  for (const m of stripped.matchAll(/(?<![\w.$:])[A-Za-z_:][A-Za-z0-9_:]*/g)) {
    const word = m[0];
    if (/^\s*\(/.test(stripped.slice(m.index + word.length))) continue;
    if (KEYWORDS.has(word.toLowerCase())) continue;
    names.add(word);
  }
  return [...names];
}

/** The series names src/shared/metrics.ts exports (a histogram's as _bucket, _sum, _count). */
export async function exportedSeriesNames(): Promise<Set<string>> {
  const metrics = createMetrics("test", { queueDepths: async () => [] });
  initWorkerLiveness(metrics, 1_000, () => 0); // the worker's own
  initSweeperPasses(metrics, () => 0); // the sweeper's own
  initSweeperIntervals(metrics, { liveness: 200, wide: 1_000 }); // the sweeper's own
  initRunProgress(metrics, 1_000); // the sweeper's own
  const names = new Set<string>();
  for (const metric of await metrics.registry.getMetricsAsJSON()) {
    if (!metric.name.startsWith("fleet_") || metric.name.startsWith("fleet_process_")) continue;
    if (String(metric.type) === "histogram")
      for (const suffix of ["_bucket", "_sum", "_count"]) names.add(`${metric.name}${suffix}`);
    else names.add(metric.name);
  }
  return names;
}

export type RecordingRule = { record: string; expr: string; labels?: Record<string, string> };
export type AlertRule = {
  alert: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
};
export type RuleFile = {
  groups: { name: string; interval?: string; rules: (RecordingRule | AlertRule)[] }[];
};

/** The rule files prometheus.yml loads (rule_files, resolved against deploy/prometheus). */
export function ruleFiles(): { path: string; file: RuleFile }[] {
  const config = parse(readFileSync(join(PROMETHEUS_DIR, "prometheus.yml"), "utf8")) as {
    rule_files?: string[];
  };
  return (config.rule_files ?? []).flatMap((pattern) => {
    const [dir, glob] = [
      pattern.slice(0, pattern.lastIndexOf("/")),
      pattern.slice(pattern.lastIndexOf("/") + 1),
    ];
    const re = new RegExp(`^${glob.replace(/[.+^${}()|[\]\\]/g, "\\$&").replace(/\*/g, "[^/]*")}$`);
    return readdirSync(join(PROMETHEUS_DIR, dir))
      .filter((name) => re.test(name))
      .sort()
      .map((name) => {
        const path = join(dir, name);
        return { path, file: parse(readFileSync(join(PROMETHEUS_DIR, path), "utf8")) as RuleFile };
      });
  });
}

export function recordingRules(): RecordingRule[] {
  return ruleFiles().flatMap(({ file }) =>
    file.groups.flatMap((g) => g.rules.filter((r): r is RecordingRule => "record" in r)),
  );
}

export function alertRules(): AlertRule[] {
  return ruleFiles().flatMap(({ file }) =>
    file.groups.flatMap((g) => g.rules.filter((r): r is AlertRule => "alert" in r)),
  );
}
