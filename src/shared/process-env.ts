/**
 * The process environment, with the working directory's `.env` loaded into it once: what
 * `loadConfig` parses when it is given no `env`.
 */
import { existsSync, readFileSync } from "node:fs";
import { parseEnv } from "node:util";
import { ValidationError } from "./errors.js";

let dotenvLoaded = false;

/** The environment with the working directory's `.env` loaded into it once (it never overrides a set variable). */
export function readProcessEnv(): Record<string, string | undefined> {
  if (!dotenvLoaded) {
    dotenvLoaded = true;
    if (existsSync(".env")) {
      let bytes: Buffer;
      try {
        bytes = readFileSync(".env");
      } catch (error) {
        throw new ValidationError(".env", `cannot be read: ${dotenvProblem(error)}`);
      }
      // Windows PowerShell's `echo A=1 > .env` writes UTF-16: read as UTF-8 it set nothing.
      if ((bytes[0] === 0xff && bytes[1] === 0xfe) || (bytes[0] === 0xfe && bytes[1] === 0xff))
        throw new ValidationError(".env", "is UTF-16; save it as UTF-8");
      const text = bytes.toString("utf8");
      // As process.loadEnvFile does (it never overrides a set variable), but without a leading
      // byte order mark (Notepad's "UTF-8 with BOM"): kept, it was part of the first variable's
      // name, and that variable (a DATABASE_URL) was not set, in silence.
      for (const [name, value] of Object.entries(parseEnv(text.replace(/^\uFEFF/, ""))))
        if (process.env[name] === undefined) process.env[name] = value;
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
