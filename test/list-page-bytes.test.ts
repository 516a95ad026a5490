/**
 * `GET /v1/sessions` is bounded by bytes as well as by `limit`: with 64 KiB of metadata a
 * session, `limit=1000` built a page of ~64 MB in the API's memory. A page now stops at about
 * MAX_LIST_PAGE_BYTES (at least one session) with a `nextCursor`, and walking the cursors
 * still lists every session exactly once, through the real API on a real Postgres.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MAX_LIST_PAGE_BYTES, MAX_METADATA_BYTES } from "../src/producer/request-limits.js";
import { readAnswer } from "./support/answer.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };
/** Sessions with metadata near the 64 KiB bound: more than one page's budget in all. */
const BIG = 90;
const SMALL = 30;

describe("a session list page bounded by bytes", () => {
  let fleet: FleetEnv;
  let base: string;
  const created = new Set<string>();

  beforeAll(async () => {
    fleet = await createFleetEnv("listbytes");
    base = (await fleet.startApi()).api.url;
    const post = async (metadata: Record<string, unknown>) => {
      const answer = await readAnswer(
        await fetch(`${base}/v1/sessions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ agent: AGENT, metadata }),
        }),
      );
      expect(answer.status, answer.text).toBe(201);
      created.add(answer.json.id);
    };
    for (let i = 0; i < SMALL; i++) await post({ i });
    // Just under the bound once stored (Postgres's text of jsonb adds a space after ':').
    for (let i = 0; i < BIG; i++) await post({ i, pad: "x".repeat(MAX_METADATA_BYTES - 100) });
  }, 120_000);
  afterAll(() => fleet?.close());

  it("stops a page at the byte budget with a nextCursor, and the pages list every session once", async () => {
    const seen: string[] = [];
    const pages: { sessions: number; bytes: number }[] = [];
    let before: string | null = null;
    do {
      const answer = await readAnswer(
        await fetch(`${base}/v1/sessions?limit=1000${before ? `&before=${before}` : ""}`),
      );
      expect(answer.status, answer.text).toBe(200);
      pages.push({ sessions: answer.json.sessions.length, bytes: Buffer.byteLength(answer.text) });
      for (const s of answer.json.sessions) seen.push(s.id);
      before = answer.json.nextCursor;
    } while (before !== null);
    console.log(
      `pages of GET /v1/sessions?limit=1000 over ${BIG} sessions with ~64 KiB metadata and ${SMALL} small ones:`,
      pages,
    );
    expect(seen).toHaveLength(BIG + SMALL);
    expect(new Set(seen)).toEqual(created);
    expect(pages.length).toBeGreaterThan(1);
    // The first page was stopped by its size, not by `limit` nor by the end of the list.
    expect(pages[0]!.sessions).toBeLessThan(BIG + SMALL);
    for (const page of pages) expect(page.bytes).toBeLessThanOrEqual(MAX_LIST_PAGE_BYTES);
  });

  it("a page within the budget is still `limit` sessions long", async () => {
    const answer = await readAnswer(await fetch(`${base}/v1/sessions?limit=10`));
    expect(answer.json.sessions).toHaveLength(10);
    expect(answer.json.nextCursor).not.toBeNull();
    const small = await readAnswer(await fetch(`${base}/v1/sessions?limit=${BIG + SMALL}`));
    expect(small.json.sessions.length).toBeLessThan(BIG + SMALL);
  });
});
