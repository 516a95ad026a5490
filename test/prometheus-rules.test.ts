/**
 * deploy/prometheus with the real promtool: the configuration and the rule files it loads
 * are valid, the unit tests of deploy/prometheus/tests pass, every alert has a case where it
 * fires and one where it does not (and breaking an alert makes them fail), every recording
 * rule is tested, and the rules read only metrics the fleet exports. Needs `promtool`
 * (Debian package `prometheus`): without it these tests fail, saying so.
 */
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { parse, stringify } from "yaml";
import { PROMETHEUS_DIR, promtool, promtoolAsync } from "./support/prometheus.js";
import { alertRules, exportedSeriesNames, metricNames, recordingRules, ruleFiles } from "./support/promql.js";

const UNIT_TESTS = "tests/rules.test.yml";

type AlertTest = { eval_time: string; alertname: string; exp_alerts?: unknown[] };
type ExprTest = { expr: string; eval_time: string; exp_samples?: unknown[] };
type UnitTests = {
  rule_files: string[];
  tests: { name?: string; alert_rule_test?: AlertTest[]; promql_expr_test?: ExprTest[] }[];
};
const unitTests = parse(readFileSync(join(PROMETHEUS_DIR, UNIT_TESTS), "utf8")) as UnitTests;

const scratch = mkdtempSync(join(tmpdir(), "fleet-promtool-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/**
 * `promtool test rules` of the shipped files, run once (~6 s of CPU a run): its test and the
 * mutation test's control (unchanged copies pass) read the same result.
 */
let shippedRun: Promise<{ status: number; output: string }> | undefined;
const testShippedRules = () => (shippedRun ??= promtoolAsync(["test", "rules", UNIT_TESTS]));

/** The files under `dir`, relative to it, sorted. */
const filesUnder = (dir: string) =>
  readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => join(e.parentPath, e.name).slice(dir.length + 1))
    .sort();

describe("deploy/prometheus (promtool)", () => {
  it("promtool check config: prometheus.yml and every rule file it loads", () => {
    const { status, output } = promtool(["check", "config", "prometheus.yml"]);
    expect(status, output).toBe(0);
    for (const { path } of ruleFiles()) expect(output).toContain(path);
    expect(ruleFiles().length).toBeGreaterThanOrEqual(2);
  });

  it("promtool check rules: every rule file", () => {
    const { status, output } = promtool(["check", "rules", ...ruleFiles().map((f) => f.path)]);
    expect(status, output).toBe(0);
  });

  it("promtool test rules: the unit tests pass, on the rule files prometheus.yml loads", {
    timeout: 180_000,
  }, async () => {
    expect([...unitTests.rule_files].sort()).toEqual(ruleFiles().map((f) => `../${f.path}`));
    const { status, output } = await testShippedRules();
    expect(status, output).toBe(0);
    expect(output).toContain("SUCCESS");
  });

  // Prometheus evaluates its groups on their own, so at one instant an alert may read a rule of
  // another group before or after that rule's evaluation (one interval old); promtool orders
  // them at random when the test file names no group_eval_order, which made a case that hung
  // on the order pass or fail from run to run. Each order forced: both pass.
  it("the unit tests pass whichever group is evaluated first", { timeout: 180_000 }, async () => {
    const groups = ruleFiles().flatMap(({ file }) => file.groups.map((g) => g.name));
    expect(groups.length).toBeGreaterThanOrEqual(2);
    const runs = [groups, [...groups].reverse()].map((order, i) => {
      const dir = join(scratch, `order-${i}`);
      cpSync(join(PROMETHEUS_DIR, "rules"), join(dir, "rules"), { recursive: true });
      cpSync(join(PROMETHEUS_DIR, "tests"), join(dir, "tests"), { recursive: true });
      writeFileSync(join(dir, UNIT_TESTS), stringify({ ...unitTests, group_eval_order: order }));
      return promtoolAsync(["test", "rules", UNIT_TESTS], dir);
    });
    for (const [i, { status, output }] of (await Promise.all(runs)).entries()) {
      expect(status, `order ${i}: ${output}`).toBe(0);
      expect(output).toContain("SUCCESS");
    }
  });

  it("has the alerts operations needs, each with a severity, summary, description and runbook", () => {
    const names = alertRules().map((a) => a.alert);
    expect(new Set(names).size).toBe(names.length);
    expect(names).toEqual(
      expect.arrayContaining([
        "FleetNoLiveWorker",
        "FleetSweeperDown",
        "FleetSessionsParked",
        "FleetCrashToResumeSlow",
        "FleetFencedWrites",
        "FleetQueueBacklogGrowing",
        "FleetQueueBacklogStuck",
        "FleetProviderErrorsHigh",
        "FleetTargetDown",
        "FleetRedisEvictionUnsafe",
        "FleetSessionsParkedRising",
        "FleetWebhookDeliveriesFailing",
        "FleetWebhooksAbandoned",
        "FleetHookFailures",
        "FleetWorkerNotLive",
        "FleetRetentionBehind",
        "FleetAuthFailuresLimited",
        "FleetSweeperStuck",
        "FleetRunStuck",
        "FleetToolTimeouts",
        "FleetToolsAbandoned",
      ]),
    );
    for (const alert of alertRules()) {
      expect(["critical", "warning"], alert.alert).toContain(alert.labels?.severity);
      expect(alert.annotations?.summary?.length ?? 0, `${alert.alert}: summary`).toBeGreaterThan(10);
      // What it means, and what to do.
      for (const key of ["description", "runbook"])
        expect(alert.annotations?.[key]?.length ?? 0, `${alert.alert}: ${key}`).toBeGreaterThan(100);
    }
  });

  it("tests every alert both firing and not firing", () => {
    const cases = unitTests.tests.flatMap((t) => t.alert_rule_test ?? []);
    for (const { alert } of alertRules()) {
      const mine = cases.filter((c) => c.alertname === alert);
      expect(
        mine.some((c) => (c.exp_alerts ?? []).length > 0),
        `${alert}: a case where it fires`,
      ).toBe(true);
      expect(
        mine.some((c) => (c.exp_alerts ?? []).length === 0),
        `${alert}: a case where it does not fire`,
      ).toBe(true);
    }
    for (const c of cases) expect(alertRules().map((a) => a.alert)).toContain(c.alertname);
  });

  it("tests every recording rule's value", () => {
    const exprs = unitTests.tests.flatMap((t) =>
      (t.promql_expr_test ?? []).filter((e) => e.exp_samples?.length),
    );
    for (const { record } of recordingRules())
      expect(
        exprs.some((e) => metricNames(e.expr).includes(record)),
        `${record} has an expected value`,
      ).toBe(true);
  });

  // Two promtool runs, at once: every alert broken at once (never firing in one copy of the
  // files, always firing in another); each alert's own cases must report it. One run per
  // alert and way took 213 s for 15 alerts on a loaded 2-core machine; promtool reports every
  // failing case, each under its alertname.
  it("fails its unit tests when any alert never fires or always fires", { timeout: 180_000 }, async () => {
    const mutated = (name: string, expr: (original: string) => string) => {
      const dir = join(scratch, name);
      cpSync(join(PROMETHEUS_DIR, "rules"), join(dir, "rules"), { recursive: true });
      cpSync(join(PROMETHEUS_DIR, "tests"), join(dir, "tests"), { recursive: true });
      for (const { path, file } of ruleFiles()) {
        for (const group of file.groups)
          for (const rule of group.rules) if ("alert" in rule) rule.expr = expr(rule.expr);
        writeFileSync(join(dir, path), stringify(file));
      }
      return dir;
    };
    const failed = (output: string) =>
      new Set([...output.matchAll(/alertname: (\w+), time:/g)].map((m) => m[1]));
    const [never, always] = await Promise.all([
      promtoolAsync(
        ["test", "rules", UNIT_TESTS],
        mutated("never", () => "vector(1) > 1"),
      ),
      promtoolAsync(
        ["test", "rules", UNIT_TESTS],
        mutated("always", (e) => `(${e}) or on() vector(1)`),
      ),
    ]);
    expect(never.status).not.toBe(0);
    expect(always.status).not.toBe(0);
    for (const { alert } of alertRules()) {
      expect(failed(never.output).has(alert), `${alert} never firing goes unnoticed`).toBe(true);
      expect(failed(always.output).has(alert), `${alert} always firing goes unnoticed`).toBe(true);
    }
    // And unchanged copies pass: the failures above are the mutations'. A copy's files, put
    // back, are the shipped ones byte for byte, and `promtool test rules` reads nothing else,
    // so the shipped run (the test above) is the copy's: a third run would repeat it.
    const control = join(scratch, "never");
    for (const { path } of ruleFiles()) cpSync(join(PROMETHEUS_DIR, path), join(control, path));
    for (const dir of ["rules", "tests"]) {
      const files = filesUnder(join(PROMETHEUS_DIR, dir));
      expect(filesUnder(join(control, dir))).toEqual(files);
      for (const file of files)
        expect(
          readFileSync(join(control, dir, file)).equals(readFileSync(join(PROMETHEUS_DIR, dir, file))),
          file,
        ).toBe(true);
    }
    expect((await testShippedRules()).status).toBe(0);
  });

  it("reads only metrics the fleet exports, `up` of prometheus.yml's jobs, and recorded series", async () => {
    const exported = await exportedSeriesNames();
    const recorded = new Set(recordingRules().map((r) => r.record));
    const config = parse(readFileSync(join(PROMETHEUS_DIR, "prometheus.yml"), "utf8")) as {
      scrape_configs: { job_name: string }[];
    };
    const jobs = config.scrape_configs.map((c) => c.job_name);
    const rules = [...recordingRules(), ...alertRules()];
    for (const rule of rules) {
      const name = "record" in rule ? rule.record : rule.alert;
      const used = metricNames(rule.expr);
      expect(used.length, name).toBeGreaterThan(0);
      for (const metric of used)
        expect(exported.has(metric) || recorded.has(metric) || metric === "up", `${name}: ${metric}`).toBe(
          true,
        );
      for (const [, job] of rule.expr.matchAll(/job="([^"]+)"/g))
        expect(jobs, `${name}: job ${job}`).toContain(job);
      for (const m of rule.expr.matchAll(/job=~"([^"]+)"/g))
        for (const job of m[1]!.split("|")) expect(jobs, `${name}: job ${job}`).toContain(job);
    }
    // Each alert on up{} names one real job; the three down-alerts cover every job.
    const downJobs = alertRules().flatMap((a) =>
      [...a.expr.matchAll(/up\{job="([^"]+)"\}/g)].map((m) => m[1]!),
    );
    expect(downJobs.sort()).toEqual([...jobs].sort());
  });
});
