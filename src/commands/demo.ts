/**
 * `fleet demo`: the main job on defaults. Creates and migrates its database, starts an API
 * and worker processes, submits a batch of scripted sessions that use tools, shows
 * progress and prints a report.
 */
import type { ChildProcess } from "node:child_process";
import { mkdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { startApi } from "../producer/api-server.js";
import { FleetClient } from "../producer/client.js";
import type { AgentConfigInput } from "../shared/agent-config.js";
import { loadConfig } from "../shared/config.js";
import { openDatabase } from "../shared/db/client.js";
import { ValidationError } from "../shared/errors.js";
import { type DemoReport, formatReport, readReport } from "./demo-report.js";
import { migrate, spawnRole } from "./serve.js";

/** A session's script: write a file, append to a shared log, answer. Some first calls fail once. */
export function demoAgent(index: number): AgentConfigInput {
  const flaky = index % 4 === 0;
  return {
    model: {
      provider: "scripted",
      steps: [
        {
          toolCalls: [
            {
              name: "write_file",
              arguments: { path: `reports/report-${index}.txt`, content: `report ${index}\n` },
            },
          ],
          delayMs: 20,
          ...(flaky ? { fault: "connection" as const, faultTimes: 1 } : {}),
        },
        {
          toolCalls: [
            { name: "append_file", arguments: { path: "batch.log", line: `session ${index} done` } },
          ],
          delayMs: 20,
        },
        { text: `Done: wrote report-${index}.txt and logged it.`, delayMs: 20 },
      ],
    },
    tools: ["write_file", "append_file"],
    system: "You are a demo agent.",
    maxTurns: 10,
  };
}

function stopChild(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once("exit", () => resolve());
    child.kill("SIGTERM");
  });
}

export async function demoCommand(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    options: { sessions: { type: "string", default: "20" }, workers: { type: "string", default: "2" } },
  });
  const sessions = Number(values.sessions);
  const workers = Number(values.workers);
  if (!Number.isInteger(sessions) || sessions < 1)
    throw new ValidationError("--sessions", "must be a whole number ≥ 1");
  if (!Number.isInteger(workers) || workers < 1)
    throw new ValidationError("--workers", "must be a whole number ≥ 1");

  const base = loadConfig();
  // Its own queue namespace and tool directory, so a demo never touches a running fleet.
  const prefix = `${base.prefix}-demo-${process.pid}`;
  const toolDir = join(base.toolDir, "demo");
  const config = { ...base, prefix, toolDir, logLevel: "warn" as const };
  await migrate(config);
  await rm(toolDir, { recursive: true, force: true });
  await mkdir(toolDir, { recursive: true });

  console.log(`fleet demo: ${sessions} sessions, ${workers} worker processes, queue prefix ${prefix}`);
  const api = await startApi(config, { port: 0 });
  const env = { FLEET_PREFIX: prefix, FLEET_TOOL_DIR: toolDir, LOG_LEVEL: "warn", METRICS_PORT: "0" };
  const children = Array.from({ length: workers }, () => spawnRole("worker", env));
  const database = openDatabase(config.databaseUrl, { max: 2 });
  try {
    const client = new FleetClient({ baseUrl: api.url });
    const started = Date.now();
    const ids = await Promise.all(
      Array.from({ length: sessions }, async (_, i) => {
        const { id } = await client.createSession({
          agent: demoAgent(i),
          metadata: { demo: true, index: i },
        });
        await client.send(id, `Write report ${i} and log it.`);
        return id;
      }),
    );
    let report: DemoReport;
    let shown = "";
    for (;;) {
      report = await readReport(database, ids);
      const line = `  completed ${report.completed}/${sessions} sessions, ${report.messages} messages`;
      if (process.stdout.isTTY) process.stdout.write(`\r${line}`);
      else if (line !== shown) console.log(line);
      shown = line;
      if (report.completed + report.stopped === sessions) break;
      if (Date.now() - started > 120_000) throw new Error("the demo did not finish within 2 minutes");
      await new Promise((r) => setTimeout(r, 300));
    }
    if (process.stdout.isTTY) process.stdout.write("\n");
    console.log(formatReport(report, Date.now() - started, toolDir));
    return report.completed === sessions ? 0 : 1;
  } finally {
    await Promise.all(children.map(stopChild));
    await api.stop();
    await database.close();
  }
}
