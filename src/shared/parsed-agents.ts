/**
 * Agents parsed once for all equal ones: a worker keeps one for the process (its jobs' stored
 * agents), a batch request one for its entries. A batch's sessions share one agent, and the
 * schema's parse (zod, ~70 µs) was about 6 % of a worker's CPU while it started 1,000
 * sessions (`bench:scale`'s ramp), and as much again per session where the API checks a
 * batch. A parse is keyed by the agent's JSON text, so two equal agents share it; it is
 * frozen throughout, since everyone given that agent gets the same object (`run-loop.ts`
 * copies it to change `maxTurns`). An agent that does not parse is not kept: each use throws
 * its ValidationError again, named by its own `root`.
 */
import { type AgentConfig, parseAgentConfig } from "./agent-config.js";
import { deepFreeze } from "./deep-freeze.js";

/** Distinct agents kept, the least recently used dropped first. */
const MAX_AGENTS = 256;
/** An agent whose JSON is longer than this (e.g. a long scripted model) is parsed every time, not kept. */
const MAX_KEPT_CHARS = 64 * 1024;

export class ParsedAgents {
  private readonly byText = new Map<string, AgentConfig>();

  constructor(
    private readonly max = MAX_AGENTS,
    private readonly maxChars = MAX_KEPT_CHARS,
  ) {}

  /**
   * `parseAgentConfig(value, root)`, the same frozen object for every equal agent. What
   * parses does not depend on `root`: it only names the field in a ValidationError.
   */
  parse(value: unknown, root = "agent"): AgentConfig {
    const text = JSON.stringify(value);
    if (text === undefined || text.length > this.maxChars) return deepFreeze(parseAgentConfig(value, root));
    const kept = this.byText.get(text);
    if (kept) {
      // Most recently used goes last: the first key is the one to drop.
      this.byText.delete(text);
      this.byText.set(text, kept);
      return kept;
    }
    const parsed = deepFreeze(parseAgentConfig(value, root));
    if (this.byText.size >= this.max) {
      const oldest = this.byText.keys().next();
      if (!oldest.done) this.byText.delete(oldest.value);
    }
    this.byText.set(text, parsed);
    return parsed;
  }

  /** How many distinct agents are kept. */
  get size(): number {
    return this.byText.size;
  }
}
