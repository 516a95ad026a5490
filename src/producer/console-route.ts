/**
 * The console (contracts §14): a single-page app built by `npm run build` (console/, Vite)
 * into dist/console, served here under `/console`. The page and its assets are served
 * without a key, so that the page can ask for one; every piece of data it shows comes from
 * the `/v1` routes, with the key the person entered sent as `Authorization: Bearer` — the
 * same authentication as any client's (http-api.ts lets only `/console` routes through
 * without a key). Without a build, `/console` answers a page that says how to make one.
 */
import { existsSync, readFileSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import fastifyStatic from "@fastify/static";
import type { FastifyInstance, FastifyReply } from "fastify";

export const CONSOLE_PREFIX = "/console";

/** Whether a route (as registered: `/console/*`) is one of the console's. */
export function isConsoleRoute(routeUrl: string | undefined): boolean {
  return routeUrl === CONSOLE_PREFIX || (routeUrl ?? "").startsWith(`${CONSOLE_PREFIX}/`);
}

/**
 * Where the build puts the console: `dist/console` of the checkout or the installed package,
 * from the sources (src/producer) as from the compiled code (dist/src/producer).
 */
export function defaultConsoleDir(): string {
  const here = dirname(fileURLToPath(import.meta.url));
  const up = resolve(here, "../..");
  return basename(up) === "dist" ? join(up, "console") : join(up, "dist", "console");
}

/** The page's own sources and the API only; no frames of it elsewhere. */
const CSP =
  "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

const NOT_BUILT = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>agent-fleet console: not built</title></head>
<body style="font-family: system-ui, sans-serif; max-width: 40rem; margin: 3rem auto; line-height: 1.5">
<h1>The console is not built</h1>
<p>This API serves the console from <code>dist/console</code>, which does not exist yet.
Run <code>npm run build</code> in the checkout (it builds the server and the console), then reload this page.</p>
<p>The API itself works without it: see <code>/v1/openapi.json</code>.</p>
</body></html>
`;

function sendPage(reply: FastifyReply, html: string, status = 200): FastifyReply {
  return reply
    .code(status)
    .header("content-type", "text/html; charset=utf-8")
    .header("cache-control", "no-cache")
    .header("content-security-policy", CSP)
    .header("x-content-type-options", "nosniff")
    .send(html);
}

/**
 * A plugin for `buildApi`'s `console` option. The SPA's routes (`/console`,
 * `/console/sessions/:id`, `/console/batches/:id`, any other `/console/…`) answer its
 * index.html; `/console/assets/…` the built files (content-hashed: cached for good).
 */
export function consolePages(dir = defaultConsoleDir()): (app: FastifyInstance) => Promise<void> {
  return async (app) => {
    const indexFile = join(dir, "index.html");
    if (!existsSync(indexFile)) {
      app.log.info(`the console is not built (no ${indexFile}): /console says to run \`npm run build\``);
      const notBuilt = async (_request: unknown, reply: FastifyReply) => sendPage(reply, NOT_BUILT, 503);
      app.get(CONSOLE_PREFIX, notBuilt);
      app.get(`${CONSOLE_PREFIX}/*`, notBuilt);
      return;
    }
    const index = readFileSync(indexFile, "utf8");
    const page = async (_request: unknown, reply: FastifyReply) => sendPage(reply, index);
    app.get(CONSOLE_PREFIX, page);
    app.get(`${CONSOLE_PREFIX}/*`, page);
    await app.register(fastifyStatic, {
      root: join(dir, "assets"),
      prefix: `${CONSOLE_PREFIX}/assets/`,
      decorateReply: false,
      index: false,
      immutable: true,
      maxAge: "365d",
      setHeaders: (reply) => reply.header("x-content-type-options", "nosniff"),
    });
  };
}
