/**
 * What the soak (bench/soak.ts) samples every ~30 s, and the growth report it prints at the
 * end: each process's RSS, heap, open file descriptors and event-loop lag; the metrics
 * endpoints' series count and size; Redis memory and the fleet's keys grouped by pattern;
 * Postgres table sizes, live and dead tuples.
 */
import { readdirSync, readFileSync } from "node:fs";
import type { Redis } from "ioredis";
import type postgres from "postgres";

export type Sample = { t: number; source: string; metric: string; value: number };

/** RSS (bytes) and open file descriptors of a process, from /proc. */
export function procStats(pid: number): { rss: number; fds: number } | null {
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    const rssKb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
    return { rss: rssKb * 1024, fds: readdirSync(`/proc/${pid}/fd`).length };
  } catch {
    return null;
  }
}

const METRICS = {
  heap_used: "fleet_process_nodejs_heap_size_used_bytes",
  lag_p99_s: "fleet_process_nodejs_eventloop_lag_p99_seconds",
  handles: "fleet_process_nodejs_active_handles_total",
  external: "fleet_process_nodejs_external_memory_bytes",
} as const;

/** The few process figures of a Prometheus text, plus its series count and size. */
export function metricsFigures(text: string): Record<string, number> {
  const out: Record<string, number> = { series: 0, metrics_bytes: Buffer.byteLength(text) };
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    out.series!++;
    // `name value` or `name{labels} value` (the fleet labels its process metrics by role).
    const [, metric, value] = /^([^{ ]+)(?:\{[^}]*\})? (\S+)/.exec(line) ?? [];
    for (const [name, wanted] of Object.entries(METRICS)) if (metric === wanted) out[name] = Number(value);
  }
  return out;
}

export async function scrape(url: string): Promise<Record<string, number> | null> {
  try {
    const response = await fetch(url, { signal: AbortSignal.timeout(5_000) });
    return response.ok ? metricsFigures(await response.text()) : null;
  } catch {
    return null;
  }
}

/** A key's pattern: every segment after the prefix that looks like an id becomes `*`. */
export function keyPattern(prefix: string, key: string): string {
  const rest = key.slice(prefix.length + 1);
  return `${prefix}:${rest
    .split(":")
    .map((part) =>
      /^[0-9a-f-]{16,}$/i.test(part) || /^\d+$/.test(part) || /^(run|webhook|resume)-/.test(part)
        ? "*"
        : part,
    )
    .join(":")}`;
}

/** The fleet's keys by pattern, and the sizes of BullMQ's sorted sets and streams. */
export async function redisFigures(redis: Redis, prefix: string): Promise<Sample[]> {
  const now = Date.now();
  const counts = new Map<string, number>();
  let cursor = "0";
  do {
    const [next, keys] = await redis.scan(cursor, "MATCH", `${prefix}:*`, "COUNT", 2000);
    cursor = next;
    for (const key of keys) {
      const pattern = keyPattern(prefix, key);
      counts.set(pattern, (counts.get(pattern) ?? 0) + 1);
    }
  } while (cursor !== "0");
  const out: Sample[] = [...counts].map(([pattern, n]) => ({
    t: now,
    source: "redis-keys",
    metric: pattern,
    value: n,
  }));
  const info = await redis.info("memory");
  out.push({
    t: now,
    source: "redis",
    metric: "used_memory",
    value: Number(/used_memory:(\d+)/.exec(info)?.[1]),
  });
  for (const queue of ["runs", "resumes", "webhooks"]) {
    for (const set of ["completed", "failed", "wait", "delayed", "active", "events"]) {
      const key = `${prefix}:${queue}:${set}`;
      const type = await redis.type(key);
      const n =
        type === "zset"
          ? await redis.zcard(key)
          : type === "list"
            ? await redis.llen(key)
            : type === "stream"
              ? await redis.xlen(key)
              : 0;
      out.push({ t: now, source: "bullmq", metric: `${queue}:${set}`, value: n });
    }
  }
  return out;
}

export async function postgresFigures(sql: postgres.Sql): Promise<Sample[]> {
  const now = Date.now();
  const rows = await sql<{ relname: string; bytes: string; live: string; dead: string }[]>`
    select relname, pg_total_relation_size(relid)::text as bytes, n_live_tup::text as live, n_dead_tup::text as dead
    from pg_stat_user_tables`;
  const out: Sample[] = [];
  for (const row of rows) {
    out.push({ t: now, source: "pg-bytes", metric: row.relname, value: Number(row.bytes) });
    out.push({ t: now, source: "pg-live", metric: row.relname, value: Number(row.live) });
    out.push({ t: now, source: "pg-dead", metric: row.relname, value: Number(row.dead) });
  }
  const [db] = await sql<{ bytes: string }[]>`select pg_database_size(current_database())::text as bytes`;
  out.push({ t: now, source: "pg", metric: "database_bytes", value: Number(db?.bytes) });
  return out;
}

/** Least-squares slope (per hour) of the samples of one series after `fromT`. */
export function slopePerHour(points: { t: number; value: number }[]): number {
  if (points.length < 2) return 0;
  const n = points.length;
  const mt = points.reduce((s, p) => s + p.t, 0) / n;
  const mv = points.reduce((s, p) => s + p.value, 0) / n;
  let num = 0;
  let den = 0;
  for (const p of points) {
    num += (p.t - mt) * (p.value - mv);
    den += (p.t - mt) ** 2;
  }
  return den === 0 ? 0 : (num / den) * 3_600_000;
}

export type Growth = { series: string; first: number; last: number; max: number; perHour: number };

/** Per series: first and last value after the warm-up, max, and the fitted growth per hour. */
export function growth(samples: Sample[], fromT: number): Growth[] {
  const bySeries = new Map<string, { t: number; value: number }[]>();
  for (const s of samples) {
    if (s.t < fromT || !Number.isFinite(s.value)) continue;
    const key = `${s.source} ${s.metric}`;
    const list = bySeries.get(key) ?? [];
    bySeries.set(key, list);
    list.push({ t: s.t, value: s.value });
  }
  return [...bySeries].map(([series, points]) => ({
    series,
    first: points[0]!.value,
    last: points.at(-1)!.value,
    max: Math.max(...points.map((p) => p.value)),
    perHour: slopePerHour(points),
  }));
}

/** Parses the soak's CSV (`t,elapsed_s,source,"metric",value`) back into samples. */
export function parseCsv(text: string): Sample[] {
  const out: Sample[] = [];
  for (const line of text.split("\n").slice(1)) {
    const m = /^(\d+),\d+,([^,]+),"(.*)",(.*)$/.exec(line);
    if (m) out.push({ t: Number(m[1]), source: m[2]!, metric: m[3]!, value: Number(m[4]) });
  }
  return out;
}

const MB = (n: number) => `${(n / 1e6).toFixed(1)} MB`;

/**
 * The report: headline growth per hour (processes that lived through the whole window,
 * Redis, Postgres, metrics series), Redis and Postgres per 1,000 sessions, then every
 * series that moved. `fromT`: the end of the warm-up.
 */
export function report(samples: Sample[], fromT: number): string {
  const all = growth(samples, fromT);
  const byName = new Map(all.map((g) => [g.series, g]));
  const span = (series: string) => {
    const ts = samples.filter((s) => s.t >= fromT && `${s.source} ${s.metric}` === series).map((s) => s.t);
    return ts.length > 1 ? Math.max(...ts) - Math.min(...ts) : 0;
  };
  const window = Math.max(...samples.map((s) => s.t)) - fromT;
  // Redis keys of the fleet's prefix in total, per sample time.
  const keysAt = new Map<number, number>();
  for (const s of samples) if (s.source === "redis-keys") keysAt.set(s.t, (keysAt.get(s.t) ?? 0) + s.value);
  const keys = growth(
    [...keysAt].map(([t, value]) => ({ t, source: "redis", metric: "keys", value })),
    fromT,
  )[0];
  const sessionsPerHour = byName.get("load sessions")?.perHour ?? 0;
  const rows: string[][] = [["what", "start", "end", "growth per hour", "per 1,000 sessions"]];
  const perK = (g: Growth | undefined, f: (n: number) => string) =>
    g && sessionsPerHour > 0 ? f((g.perHour / sessionsPerHour) * 1000) : "";
  for (const g of all.filter(
    (g) => g.series.startsWith("proc ") || / (heap_used|series|handles)$/.test(g.series),
  )) {
    // Only processes that lived through at least 80 % of the window: a killed one's growth is its start.
    if (span(g.series) < 0.8 * window) continue;
    const bytes = / (rss|heap_used)$/.test(g.series);
    const f = bytes ? MB : (n: number) => n.toFixed(0);
    rows.push([g.series.replace(/^(proc|metrics) /, ""), f(g.first), f(g.last), f(g.perHour), ""]);
  }
  for (const [name, g, f] of [
    ["Redis used_memory", byName.get("redis used_memory"), MB],
    ["Redis keys (prefix)", keys, (n: number) => n.toFixed(0)],
    ["Postgres database", byName.get("pg database_bytes"), MB],
    ["sessions submitted", byName.get("load sessions"), (n: number) => n.toFixed(0)],
  ] as const) {
    if (g)
      rows.push([name, f(g.first), f(g.last), f(g.perHour), name.startsWith("sessions") ? "" : perK(g, f)]);
  }
  const moving = all
    .filter((g) => g.first !== g.last || g.perHour !== 0)
    .sort((a, b) => a.series.localeCompare(b.series))
    .map((g) => [g.series, g.first.toFixed(0), g.last.toFixed(0), g.max.toFixed(0), g.perHour.toFixed(0)]);
  const table = (cells: string[][]) => {
    const widths = cells[0]!.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? "").length)));
    return cells.map((r) => r.map((c, i) => c.padEnd(widths[i]!)).join("  ")).join("\n");
  };
  return [
    `Headline (after the warm-up, ${(window / 60_000).toFixed(0)} min; growth fitted by least squares):`,
    table(rows),
    "",
    "Every series that moved (first, last, max, per hour):",
    table([["series", "first", "last", "max", "per hour"], ...moving]),
  ].join("\n");
}
