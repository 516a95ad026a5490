/**
 * Group commit: the writes of every session that has one ready in the same turn of the event
 * loop go to Postgres in one statement (turn-batch.ts), each still fenced by its own epoch
 * and `last_seq`, exactly as when it goes alone: a session whose fence does not match
 * changes nothing and its caller learns it as it would alone.
 *
 * A grouped statement never waits for a row lock: it locks the sessions' rows in id order
 * with SKIP LOCKED, so it cannot take part in a deadlock with a cancel or a claim of several
 * sessions. A session whose row was busy, a second write for a session already in the
 * statement, and every write of a statement Postgres refused for its content (a constraint,
 * a value it cannot store) go alone, so one bad write fails only its own caller. A lone write
 * goes alone from the start.
 */

/**
 * A statement Postgres refused for its content, changing nothing: SQLSTATE class 22 (data
 * exception, e.g. a NUL byte), 23 (a constraint), 54 (a limit) or 40 (a deadlock or a
 * serialization failure, which a grouped statement should never meet).
 */
function refusedForContent(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" && /^(22|23|54|40)/.test(code);
}

/** One write's answer from a grouped statement: `locked` false when its session row was busy. */
export type GroupedAnswer<Out> = { locked: true; out: Out } | { locked: false };

export type Settled<Out> = { outcome: Out } | { error: unknown };

export class GroupCommit<In extends { sessionId: string }, Out> {
  constructor(
    /** One statement for many sessions' writes (one per session); one answer per write, in order. */
    private readonly together: (writes: In[]) => Promise<GroupedAnswer<Out>[]>,
    /** One write in a statement of its own. */
    private readonly alone: (write: In) => Promise<Out>,
  ) {}

  /** Sends `writes` (from one turn); settles each one on its own, in order. */
  async send(writes: In[]): Promise<Settled<Out>[]> {
    // Filled by push, not `writes.map(() => null)`: see TurnBatch's dispatch (turn-batch.ts).
    const answers: (Settled<Out> | null)[] = [];
    const seen = new Set<string>();
    const grouped: number[] = [];
    for (const [i, write] of writes.entries()) {
      answers.push(null);
      if (seen.has(write.sessionId)) continue;
      seen.add(write.sessionId);
      grouped.push(i);
    }
    if (grouped.length > 1) {
      try {
        const together: In[] = [];
        for (const i of grouped) together.push(writes[i]!);
        const rows = await this.together(together);
        for (const [j, i] of grouped.entries()) {
          const row = rows[j]!;
          if (row.locked) answers[i] = { outcome: row.out };
        }
      } catch (error) {
        // Refused for what one of them held: each goes alone below, and only a bad one fails
        // again. Any other failure (a lost connection: the statement may even have committed)
        // is every caller's, as it would have been alone; their jobs are retried.
        if (!refusedForContent(error)) return writes.map(() => ({ error }));
      }
    }
    // The rest, alone. Two writes for one session go one after the other, in the order asked.
    const bySession = new Map<string, Promise<unknown>>();
    return Promise.all(
      answers.map((answer, i) => {
        if (answer) return answer;
        const write = writes[i]!;
        const previous = bySession.get(write.sessionId) ?? Promise.resolve();
        const settled = previous.then(() =>
          this.alone(write).then(
            (outcome): Settled<Out> => ({ outcome }),
            (error): Settled<Out> => ({ error }),
          ),
        );
        bySession.set(write.sessionId, settled);
        return settled;
      }),
    );
  }
}
