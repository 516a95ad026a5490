/**
 * A set that keeps at most `max` members, forgetting the least recently used (added or
 * found by `has`) past it: for what a process learns about names that come from users
 * (openai.ts, the models that refuse encrypted reasoning), so a stream of new names cannot
 * grow it for the life of the process, while the handful in use stay.
 */
export class RecentSet {
  /** Insertion order is use order: the first key is the least recently used. */
  private readonly members = new Map<string, true>();

  constructor(private readonly max: number) {}

  get size(): number {
    return this.members.size;
  }

  /** Whether `key` is a member; a member found is now the most recently used. */
  has(key: string): boolean {
    if (!this.members.delete(key)) return false;
    this.members.set(key, true);
    return true;
  }

  add(key: string): void {
    this.members.delete(key);
    this.members.set(key, true);
    while (this.members.size > this.max) {
      const oldest = this.members.keys().next().value as string;
      this.members.delete(oldest);
    }
  }
}
