/**
 * The console's build (contracts §14): `npm run build` runs it after the server's, from the
 * repository root, into dist/console, which the API serves under /console
 * (src/producer/console-route.ts) and the npm package ships (package.json `files`: dist).
 */
import { fileURLToPath } from "node:url";
import { defineConfig } from "vite";

const here = fileURLToPath(new URL(".", import.meta.url));

export default defineConfig({
  root: here,
  base: "/console/",
  // Preact's automatic JSX runtime, without a plugin: Vite's own transform does it.
  oxc: { jsx: { runtime: "automatic", importSource: "preact" } },
  build: {
    outDir: fileURLToPath(new URL("../dist/console", import.meta.url)),
    emptyOutDir: true,
    target: "es2022",
    // Small enough to read in full when something looks wrong in a browser.
    sourcemap: true,
    reportCompressedSize: false,
  },
  logLevel: "warn",
});
