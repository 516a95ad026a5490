/** Samples of a Prometheus text exposition (a `/metrics` answer), for tests that read counters. */

export type MetricSample = { name: string; labels: Record<string, string>; value: number };

/** Parses Prometheus text into samples: name, labels, value. */
export function parseSamples(text: string): MetricSample[] {
  const samples: MetricSample[] = [];
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)/.exec(line);
    if (!match) throw new Error(`unparsable metrics line: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (match[2] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g))
      labels[l[1]!] = l[2]!;
    samples.push({ name: match[1]!, labels, value: Number(match[3]) });
  }
  return samples;
}

/** The value of the first series of `name` whose labels include `labels`; undefined: none. */
export function sampleValue(text: string, name: string, labels: Record<string, string>): number | undefined {
  return parseSamples(text).find(
    (s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v),
  )?.value;
}

/** A prom-client registry, as a worker, sweeper or API holds it (`metrics.registry`). */
type Registry = {
  getMetricsAsJSON(): Promise<
    { name: string; values: { labels: Record<string, unknown>; value: number }[] }[]
  >;
};

/** `fleet_runs_total` of these registries, summed, by "kind|outcome" (zeros left out). */
export async function runsCounted(...registries: Registry[]): Promise<Record<string, number>> {
  const counts: Record<string, number> = {};
  for (const registry of registries) {
    const metric = (await registry.getMetricsAsJSON()).find((m) => m.name === "fleet_runs_total");
    for (const { labels, value } of metric?.values ?? []) {
      if (value === 0) continue;
      const key = `${labels.kind}|${labels.outcome}`;
      counts[key] = (counts[key] ?? 0) + value;
    }
  }
  return counts;
}
