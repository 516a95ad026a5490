/**
 * Reads of one key that arrive while a read of it is in flight share the next read, which
 * starts once that one has settled: at most one read per key runs at a time and one waits,
 * however many callers ask. A caller never gets a read that began before it asked, so what
 * was committed before it asked is in what it gets (a poll after a cancel sees the cancel).
 * For reads whose cost grows with what they read and that many callers ask at once (a
 * batch's counts, BatchStore's `view`).
 */
type Slot<T> = { current: Promise<T>; queued: Promise<T> | null };

export class SharedNextReads<T> {
  private readonly slots = new Map<string, Slot<T>>();

  read(key: string, load: () => Promise<T>): Promise<T> {
    const slot = this.slots.get(key);
    if (slot === undefined) {
      const current = this.begin(key, load);
      return current;
    }
    if (slot.queued !== null) return slot.queued;
    const queued = slot.current.then(
      () => undefined,
      () => undefined,
    );
    slot.queued = queued.then(() => {
      slot.queued = null;
      return this.begin(key, load, slot);
    });
    return slot.queued;
  }

  /** How many keys have a read in flight or waiting (none once every read has settled). */
  get size(): number {
    return this.slots.size;
  }

  private begin(key: string, load: () => Promise<T>, slot?: Slot<T>): Promise<T> {
    const current = (async () => load())();
    if (slot === undefined) this.slots.set(key, { current, queued: null });
    else slot.current = current;
    const settled = () => {
      const now = this.slots.get(key);
      if (now !== undefined && now.current === current && now.queued === null) this.slots.delete(key);
    };
    current.then(settled, settled);
    return current;
  }
}
