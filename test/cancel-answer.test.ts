/**
 * `POST /v1/sessions/:id/cancel` answers what it did once its cancel has committed: a read
 * that fails afterwards (Postgres lost at that moment) does not turn it into a 5xx, which
 * would release its Idempotency-Key and have its retry answered `cancelled: false`.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetService } from "../src/producer/fleet-service.js";
import type { FleetServiceDeps } from "../src/producer/fleet-service-deps.js";
import { BatchStore } from "../src/shared/store/batches.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const agent = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

describe("a session's cancel", () => {
  let fleet: FleetEnv;

  beforeAll(async () => {
    fleet = await createFleetEnv("cancelanswer");
  }, 60_000);
  afterAll(() => fleet?.close());

  it("that committed is answered cancelled: true even when reading the session again fails", async () => {
    const queries = new SessionQueries(fleet.database);
    const { id } = await queries.createSession({ agent: agent as never, tenant: "t" });
    await queries.createRun({ sessionId: id, kind: "run", trigger: "api", input: "go" });
    let cancelled = false;
    const batches = new BatchStore(fleet.database);
    const failingAfterCancel = new Proxy(queries, {
      get(target, name) {
        const value = Reflect.get(target, name);
        if (typeof value !== "function") return value;
        return (...args: unknown[]) => {
          if (cancelled && (name === "getSession" || name === "listRuns"))
            return Promise.reject(new Error("Connection terminated unexpectedly"));
          return value.apply(target, args);
        };
      },
    });
    const service = new FleetService({
      queries: failingAfterCancel,
      batches: new Proxy(batches, {
        get(target, name) {
          const value = Reflect.get(target, name);
          if (name !== "cancel") return typeof value === "function" ? value.bind(target) : value;
          return async (...args: Parameters<BatchStore["cancel"]>) => {
            const result = await target.cancel(...args);
            cancelled = true;
            return result;
          };
        },
      }),
      queues: { getJob: async () => undefined },
      metrics: { runs: { inc: () => {} }, resumeRefusals: { inc: () => {} } },
      toolNames: { known: async () => new Set<string>() },
      models: { endpoints: new Map(), allowedBaseUrls: [] },
    } as unknown as FleetServiceDeps);
    const answer = await service.cancelSession("t", id).catch((error: unknown) => error);
    expect(answer).toEqual({ id, status: "cancelled", cancelled: true });
    const [row] = await fleet.database.sql`select status from sessions where id = ${id}`;
    expect(row!.status).toBe("cancelled");
  });
});
