/**
 * The throughput baseline's worker: a minimal BullMQ + postgres.js worker that does the
 * same appends as a fleet session with no lease, fence, run rows or model: per job it
 * inserts the user message, the assistant's tool call, runs the tool (write or append a
 * file), inserts the tool result and the final answer. Started by bench/throughput.ts as
 * `node --import tsx bench/baseline-worker.ts`, configured through the environment.
 */
import { appendFile, mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { type Job, Worker } from "bullmq";
import { Redis } from "ioredis";
import postgres from "postgres";
import { benchToolCall as toolCallOf } from "./support.js";

const env = (name: string): string => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};

const databaseUrl = env("BASELINE_DATABASE_URL");
const redisUrl = env("BASELINE_REDIS_URL");
const prefix = env("BASELINE_PREFIX");
const queueName = env("BASELINE_QUEUE");
const toolDir = env("BASELINE_TOOL_DIR");
const concurrency = Number(env("BASELINE_CONCURRENCY"));

type BaselineJob = { sessionId: string; index: number };

const sql = postgres(databaseUrl, { max: concurrency + 2, onnotice: () => {} });
const connection = new Redis(redisUrl, { maxRetriesPerRequest: null });
await mkdir(join(toolDir, "written"), { recursive: true });

async function processor(job: Job<BaselineJob>): Promise<void> {
  const { sessionId, index } = job.data;
  const call = toolCallOf(index);
  const callId = `call_0_0`;
  await sql`insert into messages (session_id, seq, role, content)
            values (${sessionId}, 1, 'user', ${`Session ${index}: use the tool, then answer.`})`;
  const toolCalls = [{ id: callId, name: call.name, arguments: { path: call.path, text: call.text } }];
  await sql`insert into messages (session_id, seq, role, content, tool_calls)
            values (${sessionId}, 2, 'assistant', '', ${sql.json(toolCalls)})`;
  const target = join(toolDir, call.path);
  if (call.name === "write_file") await writeFile(target, call.text);
  else await appendFile(target, `${call.text}\n`);
  await sql`insert into messages (session_id, seq, role, content, tool_call_id)
            values (${sessionId}, 3, 'tool', ${`${call.name === "write_file" ? "wrote" : "appended to"} ${call.path}`}, ${callId})`;
  await sql`insert into messages (session_id, seq, role, content)
            values (${sessionId}, 4, 'assistant', ${`Done with session ${index}.`})`;
}

const worker = new Worker<BaselineJob>(queueName, processor, { connection, prefix, concurrency });
worker.on("failed", (job, error) => console.error(`baseline job ${job?.id} failed: ${error.message}`));
await worker.waitUntilReady();
console.log(`baseline worker ready: pid ${process.pid}`);

const stop = async () => {
  await worker.close();
  await connection.quit();
  await sql.end({ timeout: 5 });
  process.exit(0);
};
process.once("SIGTERM", () => void stop());
process.once("SIGINT", () => void stop());
