/** How the sweeper judges Redis's answers before it reads a missing lease as a frozen holder (pure). */

/** A Redis answer later than a renewal period: renewals may have been held up as long. */
export function slowAnswer(tookMs: number, ttlMs: number): boolean {
  return tookMs > ttlMs / 3;
}

/** Whether a missing lease means a frozen holder: Redis answered well for a whole TTL. */
export function leaseJudgeable(healthyForMs: number, ttlMs: number): boolean {
  return healthyForMs >= ttlMs;
}
