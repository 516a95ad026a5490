/**
 * What the README says next to its client example: the OpenAI model needs `OPENAI_API_KEY` on
 * the worker, without which the run ends with the worker's own message and the session is
 * parked for a reason the API lists; and the scripted agent it offers for trying the fleet
 * with no key is one the API takes, writing the file the example asks for. A new user running
 * the example against a fleet with no key got `provider_error` where the README showed
 * `completed`, with nothing saying why or what to use instead.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { parseAgentConfig } from "../src/shared/agent-config.js";
import { PARK_REASONS } from "../src/shared/resume-policy.js";
import { MISSING_OPENAI_KEY } from "../src/worker/models/openai.js";
import { ROOT } from "./support/fleet-env.js";

const readme = readFileSync(join(ROOT, "README.md"), "utf8");
/** The paragraph after the example, its lines joined. */
const note = /\/\/ fleet\.resume\(id, \{ model \}\)[^\n]*\n```\n\n([\s\S]*?)\n\n/
  .exec(readme)?.[1]
  ?.replace(/\n/g, " ");

describe("the README's note on its client example", () => {
  it("quotes the worker's message for a missing key and a parked reason the API lists", () => {
    expect(note).toBeDefined();
    expect(readme).toContain('model: { provider: "openai", model: "gpt-4o-mini" }');
    expect(note).toContain(`(\`${MISSING_OPENAI_KEY}\`)`);
    const parked = /parked `([a-z_]+)`/.exec(note!)?.[1];
    expect(PARK_REASONS).toContain(parked);
  });

  it("offers a scripted agent the API takes, which writes the example's notes.txt", () => {
    const json = /the scripted model \(contracts §5\), as `fleet demo` does: `(\{.*\})`/.exec(note!)?.[1];
    expect(json).toBeDefined();
    const agent = parseAgentConfig(JSON.parse(json!));
    expect(agent.model.provider).toBe("scripted");
    expect(agent.tools).toEqual(["write_file"]);
    expect(JSON.stringify(agent.model)).toContain('"path":"notes.txt"');
  });
});
