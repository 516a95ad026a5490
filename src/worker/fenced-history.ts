/**
 * The agent loop's history (agent-loop.ts): the run's messages in memory, each appended
 * through the fence (after the lease guard) and kept with its cursor, and whether the
 * session was cancelled right before a tool starts.
 */
import { tailStateAfter } from "../shared/history-tail.js";
import type { Message, StoredMessage } from "../shared/messages.js";
import type { HistoryCursor } from "../shared/store/fenced-writes.js";
import { lastStepSeq } from "../shared/store/rows.js";
import type { AgentLoopDeps, LoopInput, LoopResult } from "./loop-types.js";

/** An in-memory history that appends through the fence and keeps its cursor. */
export class FencedHistory {
  /**
   * Whether the last append found the session cancelled (null: unknown, e.g. the writes
   * cannot say, or something slow ran since).
   */
  cancelledAtLastAppend: boolean | null = null;

  constructor(
    private readonly deps: AgentLoopDeps,
    private readonly input: LoopInput,
  ) {}

  get messages(): readonly Message[] {
    return this.input.history;
  }

  private cursor(): HistoryCursor {
    const history = this.input.history;
    return { lastSeq: history.at(-1)?.seq ?? 0, lastStepSeq: lastStepSeq(history) };
  }

  /**
   * `estimatedTokens`: counted against the token budget for a step with unknown usage; less,
   * what its usage holds that was counted already (fenced-writes.ts `append`).
   */
  async append(message: Message, estimatedTokens = 0): Promise<void> {
    await this.deps.leaseGuard?.whenValid(this.input.fence.epoch);
    this.cancelledAtLastAppend = null;
    const args = [
      this.input.fence,
      this.cursor(),
      this.input.runId,
      [message],
      tailStateAfter(this.input.history, [message]),
      estimatedTokens,
    ] as const;
    let stored: StoredMessage | undefined;
    let cancelled: boolean | null = null;
    if (this.deps.writes.appendStep) {
      const step = await this.deps.writes.appendStep(...args);
      [stored] = step.stored;
      cancelled = step.cancelled;
    } else {
      [stored] = await this.deps.writes.append(...args);
    }
    this.input.history.push(stored!);
    await this.input.observer?.committed(stored!);
    if (!this.input.observer?.awaitsHooks) this.cancelledAtLastAppend = cancelled;
  }

  /** What the last message would be appended with (for a caller that stores it itself). */
  lastOf(message: Message, estimatedTokens: number): NonNullable<LoopResult["last"]> {
    return { message, tail: tailStateAfter(this.input.history, [message]), estimatedTokens };
  }

  /**
   * Whether the session was cancelled, right before a tool starts: the answer of the append
   * that just proved the lease when it gave one (and nothing slow ran since), else a read.
   */
  async cancelled(): Promise<boolean> {
    const known = this.cancelledAtLastAppend;
    this.cancelledAtLastAppend = null;
    if (known !== null) return known;
    return (await this.deps.cancelled?.(this.input.fence, this.input.runId)) ?? false;
  }
}
