/**
 * The console (contracts §14): a single-page app built by `npm run build` (console/, Vite)
 * into dist/console, served here under `/console`. The page and its assets are served
 * without a key, so that the page can ask for one; every piece of data it shows comes from
 * the `/v1` routes, with the key the person entered sent as `Authorization: Bearer` — the
 * same authentication as any client's (http-api.ts lets only `/console` routes through
 * without a key). Without a build, `/console` answers a page that says how to make one.
 * A rebuild under a running API (`npm run build:console`) is picked up at the next page
 * load: index.html names the new content-hashed assets, so it is read again when it changed.
 */
import { existsSync, type Stats } from "node:fs";
import { readFile, stat } from "node:fs/promises";
import { basename, dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import type { FastifyInstance, FastifyReply } from "fastify";
import { fastifyStatic } from "./api-packages.js";

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

/** Which version of a file `stats` describe: another inode (a rename), size or time is another file. */
function versionOf(stats: Stats): string {
  return `${stats.ino}:${stats.size}:${stats.mtimeMs}`;
}

/**
 * index.html as it is on disk now, or null when there is none (not built, or a build is
 * emptying the directory): a `stat` at each page load, a read only when it changed. It was
 * read once at start, so a rebuild left the API serving a page whose assets were gone (the
 * page stayed blank until a restart).
 */
export function currentFile(file: string): () => Promise<string | null> {
  let cached: { version: string; text: string } | undefined;
  return async () => {
    let stats: Stats;
    try {
      stats = await stat(file);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return null;
      throw error;
    }
    const version = versionOf(stats);
    if (cached?.version !== version) {
      const text = await readFile(file, "utf8").catch((error: NodeJS.ErrnoException) => {
        if (error.code === "ENOENT") return null; // Removed since the stat.
        throw error;
      });
      if (text === null) return null;
      cached = { version, text };
    }
    return cached.text;
  };
}

/**
 * A plugin for `buildApi`'s `console` option. The SPA's routes (`/console`,
 * `/console/sessions/:id`, `/console/batches/:id`, any other `/console/…`) answer its
 * index.html as it is on disk now; `/console/assets/…` the built files, looked up at each
 * request (content-hashed: cached for good). Without index.html (not built yet), the page
 * that says to build it; a build made later is served without a restart.
 */
export function consolePages(dir = defaultConsoleDir()): (app: FastifyInstance) => Promise<void> {
  return async (app) => {
    const indexFile = join(dir, "index.html");
    if (!existsSync(indexFile))
      app.log.info(`the console is not built (no ${indexFile}): /console says to run \`npm run build\``);
    const index = currentFile(indexFile);
    const page = async (_request: unknown, reply: FastifyReply) => {
      const html = await index();
      return html === null ? sendPage(reply, NOT_BUILT, 503) : sendPage(reply, html);
    };
    app.get(CONSOLE_PREFIX, page);
    app.get(`${CONSOLE_PREFIX}/*`, page);
    await app.register(fastifyStatic, {
      root: join(dir, "assets"),
      prefix: `${CONSOLE_PREFIX}/assets/`,
      // Not built yet: said above; the files are looked up at each request, so a later build is found.
      suppressWarning: true,
      decorateReply: false,
      index: false,
      immutable: true,
      maxAge: "365d",
      setHeaders: (reply) => reply.header("x-content-type-options", "nosniff"),
    });
  };
}
