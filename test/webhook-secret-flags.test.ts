/**
 * `fleet webhook-secret --idempotency-key KEY` without `--rotate` is a usage error of the
 * command, as its help says the key goes with `--rotate`: one line naming both flags and the
 * command's help, exit 2. Before, it was accepted and the key silently ignored (the secret was
 * read, nothing rotated). Checked before any request, so no API is needed here.
 */
import { describe, expect, it } from "vitest";
import { usageLine } from "./support/usage-line.js";

describe("fleet webhook-secret --idempotency-key", () => {
  it("without --rotate is a usage error naming both flags", async () => {
    // An API that cannot be reached: were the flag accepted, the command would run and fail
    // there (exit 2 too, but with a line about the API, not about the flags).
    const { line, code } = await usageLine([
      "webhook-secret",
      "--idempotency-key",
      "k1",
      "--api",
      "http://127.0.0.1:1",
    ]);
    expect(code).toBe(2);
    expect(line).toBe(
      "fleet webhook-secret: option '--idempotency-key <KEY>' goes with --rotate, which was not given; see `fleet webhook-secret --help`",
    );
  });
});
