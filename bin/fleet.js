#!/usr/bin/env node
// The `fleet` command. Runs the TypeScript sources through tsx's loader, so a fresh clone
// works after `npm ci` with no build step.
import { register } from "tsx/esm/api";

register();
await import("../src/cli.ts");
