/**
 * How `fleet session import` cuts a file's messages into requests (session-import.ts): the
 * creation (`POST /v1/sessions`), which carries the agent and the metadata besides its
 * messages, then pages (`POST /v1/sessions/:id/history`). The file's check (session-file.ts)
 * cuts them as they are sent, so that what it bounds per request is what each request holds.
 */
import { BODY_LIMIT, MAX_IMPORTED_MESSAGES } from "../producer/request-limits.js";

/** The most bytes of messages one request carries: half the API's body limit (16 MiB). */
export const PAGE_BYTES = BODY_LIMIT / 2;
/** The largest message that fits a request of its own, with room for the body around it. */
export const MAX_MESSAGE_BYTES = BODY_LIMIT - 1024 * 1024;
/** The most messages one request carries (the API's limit). */
export const PAGE_MESSAGES = MAX_IMPORTED_MESSAGES;

/**
 * The bytes of messages the creation may carry beside `agent` and `metadata` (as sent): a
 * page's, or less when they take more than the body has room for besides. An agent of 10
 * MiB (a long system prompt) and a first page of 8 MiB were a creation of 18 MiB, refused
 * whole ("the body is larger than 16 MiB"): an export of such a session could not go back in.
 */
export function creationRoom(agent: unknown, metadata: Record<string, unknown>): number {
  const beside = Buffer.byteLength(JSON.stringify({ agent, metadata }));
  return Math.max(0, Math.min(PAGE_BYTES, MAX_MESSAGE_BYTES - beside));
}

/** The requests a file's messages go in, in order: the creation's (room `creation`), then pages. */
export class RequestCuts {
  private count = 0;
  private bytes = 0;
  private creating = true;

  constructor(private readonly creation: number) {}

  /**
   * Counts in the next message, of `bytes`: true when it starts a new request. The creation
   * may end with none (no message fits beside the agent: every one goes in pages); a page
   * holds at least one (a message larger than PAGE_BYTES goes alone).
   */
  add(bytes: number): boolean {
    const room = this.creating ? this.creation : PAGE_BYTES;
    const starts =
      (this.creating || this.count > 0) && (this.count >= PAGE_MESSAGES || this.bytes + bytes > room);
    if (starts) {
      this.creating = false;
      this.count = 0;
      this.bytes = 0;
    }
    this.count++;
    this.bytes += bytes;
    return starts;
  }
}
