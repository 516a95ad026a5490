/** The version of the agent-fleet package this code runs from (`fleet --version`, the OpenAPI document). */
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";

export function packageVersion(): string {
  let dir = import.meta.dirname;
  for (let i = 0; i < 5; i++) {
    try {
      const pkg = JSON.parse(readFileSync(join(dir, "package.json"), "utf8")) as {
        name?: string;
        version?: string;
      };
      if (pkg.name === "agent-fleet" && pkg.version) return pkg.version;
    } catch {
      // not here: one level up
    }
    dir = dirname(dir);
  }
  return "unknown";
}
