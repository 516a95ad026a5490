/**
 * The process environment, with the working directory's `.env` loaded into it once: what
 * `loadConfig` parses when it is given no `env`.
 */
import { existsSync } from "node:fs";
import { ValidationError } from "./errors.js";

let dotenvLoaded = false;

/** The environment with the working directory's `.env` loaded into it once (it never overrides a set variable). */
export function readProcessEnv(): Record<string, string | undefined> {
  if (!dotenvLoaded) {
    dotenvLoaded = true;
    if (existsSync(".env")) {
      try {
        process.loadEnvFile(".env");
      } catch (error) {
        throw new ValidationError(".env", `cannot be read: ${dotenvProblem(error)}`);
      }
    }
  }
  return process.env;
}

/**
 * Why the working directory's `.env` could not be loaded, in words: Node says of a folder named
 * `.env` "Contents of '.env' should be a valid string", which named no cause (and was exit 1).
 */
function dotenvProblem(error: unknown): string {
  const code = (error as NodeJS.ErrnoException).code;
  if (code === "ERR_INVALID_ARG_TYPE" || code === "EISDIR") return "it is not a file (a folder?)";
  if (code === "EACCES" || code === "EPERM") return "permission denied";
  return code ?? (error instanceof Error ? error.message : String(error));
}
