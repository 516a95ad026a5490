/**
 * `fleet watch ID --after ""`: an empty id (an unset "$LAST_ID" in a script that follows on
 * from where it stopped) is a usage error, as an empty `--idempotency-key` is for `fleet batch
 * submit`. Before, it was taken for no `--after` at all: the watch started at the session's
 * latest run, skipping in silence every event between the id the script meant and that run.
 * Checked before any request: no API is needed.
 */
import { describe, expect, it } from "vitest";
import { runFleetCli } from "./support/fleet-cli.js";

describe("fleet watch --after with an empty id", () => {
  it("is refused in one line, exit 2, before the API is asked", async () => {
    const r = await runFleetCli(["watch", "01a24f89-671e-77eb-9503-56275c49437a", "--after", ""], {
      // Nothing listens there: a request would fail otherwise.
      FLEET_API_URL: "http://127.0.0.1:9",
    });
    expect(r.stderr).toBe(
      "fleet watch: --after: must be an event id as the stream sent it (e.g. 1700000000000-0), not empty; leave it out to start at the session's latest run\n",
    );
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
  }, 60_000);
});
