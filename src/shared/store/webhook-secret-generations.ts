/**
 * Each tenant's webhook signing secret's generation (webhook-secrets.ts): read by the sweeper
 * at each delivery and by `GET /v1/webhook-secret`, moved on by `POST /v1/webhook-secret/rotate`.
 * Times are the database's: the API that rotates and the sweeper that signs agree on when a
 * grace period ends whatever their clocks say.
 */
import type { Database } from "../db/client.js";
import type { SecretGeneration } from "../webhook-secrets.js";

export type Rotation = { generation: number; previousValidUntil: Date };

export class WebhookSecretGenerations {
  constructor(private readonly database: Database) {}

  /** The tenant's generation now (0 without a row), and whether the one before still signs. */
  async current(tenant: string): Promise<SecretGeneration> {
    const [row] = await this.database.sql<{ generation: number; previous_valid: boolean }[]>`
      select generation, previous_valid_until > now() as previous_valid
        from webhook_secret_generations where tenant = ${tenant}`;
    return row
      ? { generation: row.generation, previousValid: row.previous_valid }
      : { generation: 0, previousValid: false };
  }

  /**
   * Moves the tenant to its next generation, in one statement (two rotations at once make
   * two generations, never the same one twice); the one it leaves still signs for `graceMs`.
   */
  async rotate(tenant: string, graceMs: number): Promise<Rotation> {
    const [row] = await this.database.sql<{ generation: number; previous_valid_until: string | Date }[]>`
      insert into webhook_secret_generations as g (tenant, generation, previous_valid_until)
      values (${tenant}, 1, now() + ${graceMs} * interval '1 millisecond')
      on conflict (tenant) do update
        set generation = g.generation + 1, rotated_at = now(),
            previous_valid_until = excluded.previous_valid_until
      returning generation, previous_valid_until`;
    return { generation: row!.generation, previousValidUntil: new Date(row!.previous_valid_until) };
  }
}
