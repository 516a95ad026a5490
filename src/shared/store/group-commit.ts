/**
 * Group commit: the writes of every session that has one ready in the same turn of the event
 * loop go to Postgres in one statement (turn-batch.ts), each still fenced by its own epoch
 * and `last_seq`, exactly as when it goes alone: a session whose fence does not match
 * changes nothing and its caller learns it as it would alone.
 *
 * A grouped statement never waits for a row lock: it locks the sessions' rows in id order
 * with SKIP LOCKED, so it cannot take part in a deadlock with a cancel or a claim of several
 * sessions. A session whose row was busy, a second write for a session already in the
 * statement, and every write of a statement Postgres refused as a whole (a constraint, a
 * value it cannot store) go alone, so one bad write fails only its own caller. A lone write
 * goes alone from the start.
 */

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
    const answers: (Settled<Out> | null)[] = writes.map(() => null);
    const seen = new Set<string>();
    const grouped: number[] = [];
    for (const [i, write] of writes.entries()) {
      if (seen.has(write.sessionId)) continue;
      seen.add(write.sessionId);
      grouped.push(i);
    }
    if (grouped.length > 1) {
      try {
        const rows = await this.together(grouped.map((i) => writes[i]!));
        for (const [j, i] of grouped.entries()) {
          const row = rows[j]!;
          if (row.locked) answers[i] = { outcome: row.out };
        }
      } catch {
        // Refused as a whole: each goes alone below, and only a bad one fails again.
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
