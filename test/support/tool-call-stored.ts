import type { FleetClient } from "../../src/producer/client.js";
import { waitFor } from "./fleet-env.js";

/** Waits (up to `timeoutMs`) until the session holds an assistant message that calls the tool `name`. */
export async function waitForToolCall(
  client: Pick<FleetClient, "getSession">,
  sessionId: string,
  name: string,
  timeoutMs = 15_000,
): Promise<void> {
  await waitFor(
    async () =>
      (await client.getSession(sessionId)).messages.some(
        (m) => m.role === "assistant" && (m.toolCalls ?? []).some((c) => c.name === name),
      ),
    timeoutMs,
    `the ${name} call to be stored`,
  );
}
