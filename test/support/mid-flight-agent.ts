/**
 * The agent of the outage tests (redis-outage-rideout, postgres-outage): session `<tag>-<i>`
 * writes `before`, then either sleeps 6 s (a tool in flight when the store goes, even `i`) or
 * takes 6 s to answer (a model call in flight, odd `i`), then writes `after`, then answers
 * `done`. Each file it writes shows that a tool ran, and how often.
 */
import type { Sql } from "postgres";
import type { FleetClient } from "../../src/producer/client.js";
import { waitFor } from "./fleet-env.js";

export function midFlightAgent(tag: string, i: number) {
  const write = (id: string) => ({
    id,
    name: "append_file",
    arguments: { path: `${tag}-${i}-${id}.txt`, line: "ran" },
  });
  const inTool = i % 2 === 0;
  return {
    model: {
      provider: "scripted" as const,
      steps: [
        { toolCalls: [write("before")] },
        ...(inTool
          ? [
              { toolCalls: [{ id: "nap", name: "sleep", arguments: { ms: 6_000 } }] },
              { toolCalls: [write("after")] },
            ]
          : [{ toolCalls: [write("after")], delayMs: 6_000 }]),
        { text: "done" },
      ],
    },
    tools: ["append_file", "sleep"],
  };
}

/** `count` sessions of `midFlightAgent(tag, i)`, each sent its first message; their ids. */
export async function startMidFlight(client: FleetClient, tag: string, count: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < count; i++) {
    const { id } = await client.createSession({ agent: midFlightAgent(tag, i) });
    await client.send(id, `session ${i}`);
    ids.push(id);
  }
  return ids;
}

/** How many of the sessions `ids` have stored the result of their `before` write. */
export async function pastBefore(sql: Sql, ids: string[]): Promise<number> {
  const [row] = await sql<{ n: number }[]>`select count(*)::int as n from messages
    where tool_call_id = 'before' and session_id in ${sql(ids)}`;
  return row!.n;
}

/**
 * Waits until every session of `ids` has completed (`orParked`: or was parked); past
 * `timeoutMs` it prints the sessions' and runs' states and the last of `logs` (the processes'
 * output), then fails as `waitFor` does.
 */
export async function untilSessionsEnd(
  sql: Sql,
  ids: string[],
  options: { orParked: boolean; timeoutMs: number; logs?: () => string[] },
): Promise<void> {
  const what = options.orParked ? "every session completed or parked" : "every session completed";
  const ended = async () => {
    const [row] = await sql<{ n: number }[]>`select count(*)::int as n from sessions
      where (tail_state = 'completed' or (${options.orParked} and status = 'parked')) and id in ${sql(ids)}`;
    return row!.n;
  };
  await waitFor(async () => (await ended()) === ids.length, options.timeoutMs, what).catch(async (error) => {
    console.log(
      await sql`select status, tail_state, parked_reason, count(*) from sessions group by 1, 2, 3`,
      await sql`select kind, status, ended_reason, count(*) from runs group by 1, 2, 3`,
      ...(options.logs?.() ?? []).map((log) => log.slice(-3_000)),
    );
    throw error;
  });
}
