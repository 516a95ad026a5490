/**
 * The tools agents list, checked where sessions are created (FleetService, batch-actions.ts):
 * each listed once, each registered by some worker of the fleet (contracts.md §12).
 */
import type { AgentConfig } from "../shared/agent-config.js";
import { FleetStateError, ValidationError } from "../shared/errors.js";
import type { FleetServiceDeps } from "./fleet-service-deps.js";

/**
 * Refuses an agent that lists a tool twice or a tool no worker of the fleet registered, naming
 * the first such `…agent.tools[i]`: it could only fail later, on a worker (contracts.md §12). One
 * look-up for all the agents of a request.
 */
export async function checkAgentTools(
  toolNames: FleetServiceDeps["toolNames"],
  agents: { agent: AgentConfig; field: string }[],
): Promise<void> {
  // A name listed twice would be sent to the model twice: providers refuse such a request
  // (Anthropic: "Tool names must be unique"), so the session could only fail at its first run.
  for (const { agent, field } of agents) {
    const first = new Map<string, number>();
    for (const [i, name] of agent.tools.entries()) {
      const at = first.get(name);
      if (at !== undefined)
        throw new ValidationError(
          `${field}.tools[${i}]`,
          `lists "${name}" again (as ${field}.tools[${at}]); each tool is listed once`,
        );
      first.set(name, i);
    }
  }
  const known = await toolNames.known(new Set(agents.flatMap(({ agent }) => agent.tools)));
  for (const { agent, field } of agents) {
    const i = agent.tools.findIndex((name) => !known.has(name));
    if (i >= 0) {
      throw new FleetStateError(
        `${field}.tools[${i}]`,
        `no worker of this fleet has registered a tool named "${agent.tools[i]}"`,
      );
    }
  }
}
