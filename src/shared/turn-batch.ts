/**
 * Calls made in one turn of the event loop, sent together when the turn ends. A worker runs
 * many sessions in one process; their Redis writes (events, leases) each cost a round trip
 * and a script call of their own, and most of a worker's CPU went to sockets. Gathered per
 * turn they cost one: under load many sessions write in the same turn, and a lone call
 * waits for nothing but the end of its turn (setImmediate).
 */
export class TurnBatch<In, Out> {
  private pending: { item: In; resolve: (out: Out) => void; reject: (error: unknown) => void }[] = [];
  /** The weight of the pending items (see `weigh`). */
  private pendingWeight = 0;
  private scheduled = false;
  /** The gather timer of the batch being filled: a batch that fills up first clears it. */
  private timer: ReturnType<typeof setTimeout> | null = null;

  constructor(
    /** Sends the items in one call; answers one result per item, in their order. */
    private readonly send: (items: In[]) => Promise<Out[]>,
    /** At most this many items per call (a full batch goes out at once). */
    private readonly max = 64,
    /** false: every call goes out on its own (e.g. keys that may be in different Cluster slots). */
    private readonly combine = true,
    /**
     * 0: a call goes out at the end of its turn. Above 0: this many ms after the first call
     * of the batch, with every call made meanwhile (WORKER_GATHER_MS): under load the
     * batches get bigger and fewer, for a little latency on each call.
     */
    private readonly gatherMs = 0,
    /**
     * An item's weight (e.g. its bytes) and the most one call carries: a batch goes out
     * before an item that would take it past `maxWeight` (an item heavier than that alone).
     */
    private readonly weigh?: { of: (item: In) => number; max: number },
  ) {}

  call(item: In): Promise<Out> {
    return new Promise<Out>((resolve, reject) => {
      const entry = { item, resolve, reject };
      if (!this.combine) {
        void this.dispatch([entry]);
        return;
      }
      const weight = this.weigh?.of(item) ?? 0;
      if (this.weigh && this.pending.length > 0 && this.pendingWeight + weight > this.weigh.max) this.flush();
      this.pending.push(entry);
      this.pendingWeight += weight;
      if (this.pending.length >= this.max || (this.weigh && this.pendingWeight >= this.weigh.max))
        this.flush();
      else if (!this.scheduled) {
        this.scheduled = true;
        if (this.gatherMs > 0) this.timer = setTimeout(() => this.flush(), this.gatherMs);
        else setImmediate(() => this.flush());
      }
    });
  }

  private flush(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    this.scheduled = false;
    const entries = this.pending;
    this.pending = [];
    this.pendingWeight = 0;
    if (entries.length > 0) void this.dispatch(entries);
  }

  private async dispatch(entries: typeof this.pending): Promise<void> {
    // Filled by push, not by `.map`: V8's builtin `map` and the `map` it inlines into optimized
    // code make arrays of two elements kinds (packed, holey), and a `send` optimized for one was
    // thrown away at the first of the other and compiled again (docs/performance.md).
    const items: In[] = [];
    for (const entry of entries) items.push(entry.item);
    let results: Out[];
    try {
      results = await this.send(items);
      if (results.length !== entries.length)
        throw new Error(`a batch of ${entries.length} calls got ${results.length} answers`);
    } catch (error) {
      for (const entry of entries) entry.reject(error);
      return;
    }
    for (const [i, entry] of entries.entries()) entry.resolve(results[i]!);
  }
}

/**
 * Whether keys under `prefix` may share one multi-key call: always on one Redis; on a Cluster
 * only when the prefix is a hash tag (config.ts makes it one), so that they share one slot.
 * A cluster with a prefix without a tag is not supported beyond that: even one session's
 * event write or lease names two keys in two slots (CROSSSLOT, checked on a 3-master cluster).
 */
export function keysShareSlot(cluster: boolean, prefix: string): boolean {
  return !cluster || /^\{[^}]+\}/.test(prefix);
}
